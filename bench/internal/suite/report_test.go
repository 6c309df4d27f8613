package suite

import "testing"

func TestSplice(t *testing.T) {
	block := BeginMarker + "\nnew\n" + EndMarker + "\n"
	for _, tc := range []struct{ doc, want string }{
		{"", block},
		{"# T\n", "# T\n" + block},
		{"# T", "# T\n" + block},
		{"a\n" + BeginMarker + "\nold\nold\n" + EndMarker + "\nb\n", "a\n" + block + "b\n"},
	} {
		if got := Splice(tc.doc, "new\n"); got != tc.want {
			t.Errorf("Splice(%q) = %q, want %q", tc.doc, got, tc.want)
		}
	}
}

func TestThousands(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 999.6: "1,000", 1234567: "1,234,567", 12: "12"} {
		if got := thousands(v); got != want {
			t.Errorf("thousands(%v) = %q, want %q", v, got, want)
		}
	}
}
