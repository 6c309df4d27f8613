// Command pin keeps a Dockerfile's base images pinned by digest. Every FROM line names its
// image as repository:tag@sha256:digest; pin asks the registry for the digest the tag points
// to now (the multi-platform index) and rewrites the line when it moved. With -check it
// rewrites nothing and exits 1 if any FROM line lacks a digest.
//
// Usage, from the repository root:
//
//	(cd hack/image && go run ./pin ../../Dockerfile)        # refresh the digests
//	(cd hack/image && go run ./pin -check ../../Dockerfile) # every base pinned?
package main

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// fromLine matches a FROM instruction's image: optional flags, then repository:tag, an
// optional @sha256 digest, and an optional stage name.
var fromLine = regexp.MustCompile(`^(\s*FROM\s+(?:--\S+\s+)*)([^\s@]+)(@sha256:[0-9a-f]{64})?(\s.*)?$`)

// resolver returns the digest ("sha256:…") that an image reference's tag points to.
type resolver func(ref string) (string, error)

func main() {
	check := flag.Bool("check", false, "only check that every FROM line carries a digest")
	insecure := flag.Bool("insecure", false, "talk plain HTTP to the registry (a local test registry)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: pin [-check] [-insecure] DOCKERFILE")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	path := flag.Arg(0)
	src, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pin:", err)
		os.Exit(1)
	}
	if *check {
		if bad := unpinned(string(src)); len(bad) > 0 {
			fmt.Fprintf(os.Stderr, "pin: %s: FROM without a digest: %s\n", path, strings.Join(bad, ", "))
			os.Exit(1)
		}
		return
	}
	out, changed, err := repin(string(src), registryDigest(*insecure))
	if err != nil {
		fmt.Fprintln(os.Stderr, "pin:", err)
		os.Exit(1)
	}
	for _, c := range changed {
		fmt.Println(c)
	}
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "pin:", err)
		os.Exit(1)
	}
}

// registryDigest resolves a tag with a HEAD request to its registry, anonymously.
func registryDigest(insecure bool) resolver {
	return func(ref string) (string, error) {
		var opts []name.Option
		if insecure {
			opts = append(opts, name.Insecure)
		}
		r, err := name.ParseReference(ref, opts...)
		if err != nil {
			return "", err
		}
		d, err := remote.Head(r)
		if err != nil {
			return "", fmt.Errorf("resolve %s: %w", ref, err)
		}
		return d.Digest.String(), nil
	}
}

// repin rewrites each FROM line's digest to the one its tag resolves to, and says which moved.
// Stage references (FROM build) and scratch are left alone.
func repin(src string, resolve resolver) (string, []string, error) {
	lines := strings.Split(src, "\n")
	stages := map[string]bool{"scratch": true}
	var changed []string
	for i, l := range lines {
		m := fromLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		image, old, rest := m[2], strings.TrimPrefix(m[3], "@"), m[4]
		isStage := stages[image]
		stages[stageName(rest)] = true
		if isStage {
			continue
		}
		if strings.Contains(image, "$") {
			return "", nil, fmt.Errorf("line %d: FROM %s: a build argument in the image cannot be pinned; name the image", i+1, image)
		}
		d, err := resolve(image)
		if err != nil {
			return "", nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		if d != old {
			changed = append(changed, fmt.Sprintf("%s: %s -> %s", image, orNone(old), d))
		}
		lines[i] = m[1] + image + "@" + d + rest
	}
	return strings.Join(lines, "\n"), changed, nil
}

// unpinned lists the base images of FROM lines that carry no digest (stages and scratch aside).
func unpinned(src string) []string {
	stages := map[string]bool{"scratch": true}
	var bad []string
	for _, l := range strings.Split(src, "\n") {
		m := fromLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		if !stages[m[2]] && m[3] == "" {
			bad = append(bad, m[2])
		}
		stages[stageName(m[4])] = true
	}
	return bad
}

// stageName is the name a FROM line gives its stage ("AS build"), or "scratch" when it names none.
func stageName(rest string) string {
	if f := strings.Fields(rest); len(f) == 2 && strings.EqualFold(f[0], "AS") {
		return f[1]
	}
	return "scratch"
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
