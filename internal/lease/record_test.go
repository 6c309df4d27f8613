package lease

import (
	"errors"
	"testing"
	"time"
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
		got, err := ParseRecord(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseRecord(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if got.String() != tc.in {
			t.Errorf("String() = %q, want %q", got.String(), tc.in)
		}
	}
	for _, bad := range []string{"", "v1", "v2:1:a:b", "v1:x:a:b", "v1:0:a:b", "v1:-1:a:b", "v1:01:a:b", "v1:+1:a:b", "v1:1:a", "v1:1::b", "v1:99999999999999999999:a:b"} {
		if _, err := ParseRecord(bad); !errors.Is(err, ErrBadRecord) {
			t.Errorf("ParseRecord(%q) err = %v, want ErrBadRecord", bad, err)
		}
	}
}

func TestParseEvent(t *testing.T) {
	ev, err := ParseEvent("released 0 v1:5:abc:pod a")
	if err != nil || ev.Kind != Released || ev.TTL != 0 || ev.Record != (Record{5, "abc", "pod a"}) {
		t.Fatalf("ParseEvent = %+v, %v", ev, err)
	}
	ev, err = ParseEvent("renewed 15000 v1:6:abc:pod")
	if err != nil || ev.Kind != Renewed || ev.TTL != 15*time.Second || ev.Record != (Record{6, "abc", "pod"}) {
		t.Fatalf("ParseEvent = %+v, %v", ev, err)
	}
	if Renewed.String() != "renewed" || EventKind(9).String() != "EventKind(9)" {
		t.Fatalf("EventKind.String: %q %q", Renewed, EventKind(9))
	}
	for _, bad := range []string{"", "released", "released 0", "expired 0 v1:5:a:b", "acquired 10 junk", "acquired -1 v1:5:a:b", "acquired x v1:5:a:b"} {
		if _, err := ParseEvent(bad); err == nil {
			t.Errorf("ParseEvent(%q) succeeded", bad)
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
		r, err := ParseRecord(s)
		if err != nil {
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("ParseRecord(%q) error %v does not wrap ErrBadRecord", s, err)
			}
			return
		}
		if r.String() != s {
			t.Fatalf("ParseRecord(%q).String() = %q", s, r.String())
		}
		if r.Token <= 0 || r.Instance == "" {
			t.Fatalf("ParseRecord(%q) = %+v: accepted a non-positive token or empty instance", s, r)
		}
	})
}

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"job", "my-controller.kube-system", "tenant/42", "ünïcode"} {
		if err := ValidateName(ok); err != nil {
			t.Errorf("ValidateName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a{", "}", "a b", "a\tb", "a\x00", "\xff"} {
		if err := ValidateName(bad); err == nil {
			t.Errorf("ValidateName(%q) succeeded", bad)
		}
	}
}
