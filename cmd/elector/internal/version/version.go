// Package version reports the version of the elector binary.
//
// Release builds stamp the version with the linker:
//
//	go build -ldflags "-X github.com/elector/elector/cmd/elector/internal/version.Version=v1.2.3 \
//	  -X github.com/elector/elector/cmd/elector/internal/version.Commit=$(git rev-parse HEAD) \
//	  -X github.com/elector/elector/cmd/elector/internal/version.Date=$(date -u +%Y-%m-%dT%H:%M:%SZ)" ./cmd/elector
//
// Unstamped builds fall back to what the Go toolchain recorded in the binary
// (runtime/debug.ReadBuildInfo): the module version for `go install
// module@version`, and the VCS revision and time for builds inside a git
// checkout.
//
// It owns the version string. It must not read flags or the environment.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// The linker can only set package-level string variables (-ldflags -X), so
// these three are the project's one deliberate exception to "no global
// state". Nothing in the program writes them.
var (
	// Version is the release version, e.g. "v1.2.3". Set with -ldflags -X.
	Version = "dev"
	// Commit is the VCS revision the binary was built from. Set with -ldflags -X.
	Commit = ""
	// Date is the build time, preferably RFC 3339 in UTC. Set with -ldflags -X.
	Date = ""
)

// Info describes one build of the program.
type Info struct {
	// Version is the release version, "dev" when unknown.
	Version string
	// Commit is the VCS revision, empty when unknown. A "-dirty" suffix marks
	// a build from a modified working tree (fallback path only).
	Commit string
	// Date is the build or commit time, empty when unknown.
	Date string
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string
	// Platform is GOOS/GOARCH.
	Platform string
}

// Get returns the build information of the running binary: the values set
// with -ldflags -X, completed from runtime/debug.ReadBuildInfo where they
// were not set.
func Get() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return resolve(Version, Commit, Date, bi)
}

// String returns a one-line description of the build, for example
//
//	elector v1.2.3 (commit 0123456789ab, built 2024-05-01T10:00:00Z, go1.26.8 linux/amd64)
func String() string {
	return Get().String()
}

// String formats i as one line; see the package-level String. A commit or date that neither
// the linker stamp nor the build info gave (a build with -buildvcs=false, or outside a git
// checkout) reads "unknown": the line always has the same fields.
func (i Info) String() string {
	return fmt.Sprintf("elector %s (commit %s, built %s, %s %s)",
		i.Version, orUnknown(i.Commit), orUnknown(i.Date), i.GoVersion, i.Platform)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// shortCommitLen is how many hex digits of a VCS revision taken from the
// build info are shown; a stamped Commit is shown as given.
const shortCommitLen = 12

// resolve merges the stamped values with the build info bi (which may be nil).
func resolve(version, commit, date string, bi *debug.BuildInfo) Info {
	info := Info{
		Version:   version,
		Commit:    commit,
		Date:      date,
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	}
	if info.Version == "" {
		info.Version = "dev"
	}
	if bi == nil {
		return info
	}
	if bi.GoVersion != "" {
		info.GoVersion = bi.GoVersion
	}
	if info.Version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		info.Version = bi.Main.Version
	}
	var revision, vcsTime string
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.time":
			vcsTime = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if info.Commit == "" && revision != "" {
		if len(revision) > shortCommitLen {
			revision = revision[:shortCommitLen]
		}
		info.Commit = revision
		if modified {
			info.Commit += "-dirty"
		}
	}
	if info.Date == "" {
		info.Date = vcsTime
	}
	return info
}
