package lease

import (
	"errors"
	"testing"

	"github.com/elector/elector/internal/leasewire"
)

func TestParseRecord(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Record
	}{
		{"v1:1:abc:pod-0", Record{1, "abc", "pod-0"}},
		{"v1:1732900000000000:0123456789abcdef:ns/pod:with:colons", Record{1732900000000000, "0123456789abcdef", "ns/pod:with:colons"}},
		{"v1:9:i:", Record{9, "i", ""}},
	} {
		got, err := parseRecord(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseRecord(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if got.String() != tc.in {
			t.Errorf("String() = %q, want %q", got.String(), tc.in)
		}
	}
	for _, bad := range []string{"", "v1", "v2:1:a:b", "v1:x:a:b", "v1:0:a:b", "v1:-1:a:b", "v1:01:a:b", "v1:+1:a:b", "v1:1:a", "v1:1::b", "v1:99999999999999999999:a:b"} {
		if _, err := parseRecord(bad); !errors.Is(err, leasewire.ErrBadRecord) {
			t.Errorf("ParseRecord(%q) err = %v, want leasewire.ErrBadRecord", bad, err)
		}
	}
}

// FuzzParseRecord checks that every accepted record encodes back to exactly its input, so
// that the owner check, which compares encoded strings, agrees with the parsed fields.
func FuzzParseRecord(f *testing.F) {
	for _, s := range []string{"v1:1:abc:pod-0", "v1:12:a:b:c", "v1:01:a:b", "v1:1::", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := parseRecord(s)
		if err != nil {
			if !errors.Is(err, leasewire.ErrBadRecord) {
				t.Fatalf("parseRecord(%q) error %v does not wrap leasewire.ErrBadRecord", s, err)
			}
			return
		}
		if r.String() != s {
			t.Fatalf("parseRecord(%q).String() = %q", s, r.String())
		}
		if r.Token <= 0 || r.Instance == "" {
			t.Fatalf("parseRecord(%q) = %+v: accepted a non-positive token or empty instance", s, r)
		}
	})
}
