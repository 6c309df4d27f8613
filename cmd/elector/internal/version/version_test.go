package version

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/elector/elector/internal/testing/ciskip"
)

func TestResolve(t *testing.T) {
	goLine := runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
	vcs := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	tests := []struct {
		name                  string
		version, commit, date string
		bi                    *debug.BuildInfo
		want                  string
	}{
		{
			name:    "nothing known",
			version: "dev",
			want:    "elector dev (commit unknown, built unknown, " + goLine + ")",
		},
		{
			name:    "empty version becomes dev",
			version: "",
			want:    "elector dev (commit unknown, built unknown, " + goLine + ")",
		},
		{
			name:    "stamped values win over build info",
			version: "v1.2.3", commit: "abc", date: "2024-05-01T10:00:00Z",
			bi: &debug.BuildInfo{
				GoVersion: "go1.99.0",
				Main:      debug.Module{Version: "v9.9.9"},
				Settings:  vcs("vcs.revision", "ffffffffffffffffffff", "vcs.time", "2000-01-01T00:00:00Z"),
			},
			want: "elector v1.2.3 (commit abc, built 2024-05-01T10:00:00Z, go1.99.0 " + runtime.GOOS + "/" + runtime.GOARCH + ")",
		},
		{
			name:    "go install module@version",
			version: "dev",
			bi:      &debug.BuildInfo{Main: debug.Module{Version: "v0.4.0"}},
			want:    "elector v0.4.0 (commit unknown, built unknown, " + goLine + ")",
		},
		{
			name:    "devel module version is not a version",
			version: "dev",
			bi: &debug.BuildInfo{
				Main:     debug.Module{Version: "(devel)"},
				Settings: vcs("vcs.revision", "0123456789abcdef0123", "vcs.time", "2024-01-02T03:04:05Z", "vcs.modified", "false"),
			},
			want: "elector dev (commit 0123456789ab, built 2024-01-02T03:04:05Z, " + goLine + ")",
		},
		{
			name:    "modified tree is marked dirty",
			version: "dev",
			bi:      &debug.BuildInfo{Settings: vcs("vcs.revision", "0123456789abcdef0123", "vcs.modified", "true")},
			want:    "elector dev (commit 0123456789ab-dirty, built unknown, " + goLine + ")",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := resolve(tt.version, tt.commit, tt.date, tt.bi).String()
			if got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestStringOfTestBinary(t *testing.T) {
	got := String()
	if !strings.HasPrefix(got, "elector ") || !strings.Contains(got, runtime.GOOS+"/"+runtime.GOARCH) {
		t.Errorf("String() = %q, want elector <version> (... %s/%s)", got, runtime.GOOS, runtime.GOARCH)
	}
}

// TestLdflagsStamp builds a tiny program with -ldflags -X and checks that the
// variable paths documented in the package comment really are stampable.
func TestLdflagsStamp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary; skipped with -short")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		ciskip.Skip(t, "go toolchain not on PATH: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "stamp")
	const pkg = "github.com/elector/elector/cmd/elector/internal/version"
	ldflags := "-X " + pkg + ".Version=v1.2.3 -X " + pkg + ".Commit=cafe -X " + pkg + ".Date=2024-05-01T10:00:00Z"
	build := exec.Command(goBin, "build", "-o", bin, "-ldflags", ldflags, "./testdata/stamp")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("run stamped binary: %v", err)
	}
	want := "elector v1.2.3 (commit cafe, built 2024-05-01T10:00:00Z, "
	if got := string(out); !strings.HasPrefix(got, want) {
		t.Errorf("stamped binary printed %q, want prefix %q", got, want)
	}
}
