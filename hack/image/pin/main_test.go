package main

import (
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestRepoDockerfilePinned: every base image of the repository's Dockerfile carries a digest.
func TestRepoDockerfilePinned(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if bad := unpinned(string(src)); len(bad) > 0 {
		t.Fatalf("Dockerfile: FROM without a digest: %v (run hack/image/pin)", bad)
	}
	if n := strings.Count(string(src), "@sha256:"); n < 2 {
		t.Fatalf("Dockerfile has %d pinned images, want the builder and the base", n)
	}
}

// TestRepinAgainstRegistry pins a Dockerfile against a registry on loopback: a multi-platform
// index and a single image, a stage reference left alone, and a moved tag re-pinned.
func TestRepinAgainstRegistry(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	push := func(ref string, index bool) string {
		t.Helper()
		r, err := name.ParseReference(ref, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if index {
			idx, err := random.Index(64, 1, 2)
			if err != nil {
				t.Fatal(err)
			}
			if err := remote.WriteIndex(r, idx); err != nil {
				t.Fatal(err)
			}
			d, _ := idx.Digest()
			return d.String()
		}
		img, err := random.Image(64, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(r, img); err != nil {
			t.Fatal(err)
		}
		d, _ := img.Digest()
		return d.String()
	}
	golang := host + "/golang:1.26"
	base := host + "/distroless/static:nonroot"
	goDigest := push(golang, true)
	baseDigest := push(base, false)

	dir := t.TempDir()
	df := filepath.Join(dir, "Dockerfile")
	src := "# syntax=docker/dockerfile:1\n" +
		"FROM --platform=$BUILDPLATFORM " + golang + " AS build\n" +
		"RUN true\n" +
		"FROM build AS test\n" +
		"FROM " + base + "\n" +
		"COPY --from=build /out/elector /elector\n"
	if err := os.WriteFile(df, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if bad := unpinned(src); strings.Join(bad, ",") != golang+","+base {
		t.Fatalf("unpinned = %v, want the two bases and not the stage", bad)
	}
	out, changed, err := repin(src, registryDigest(true))
	if err != nil {
		t.Fatal(err)
	}
	if len(changed) != 2 {
		t.Errorf("changed %v, want both bases", changed)
	}
	for _, want := range []string{
		"FROM --platform=$BUILDPLATFORM " + golang + "@" + goDigest + " AS build\n",
		"FROM build AS test\n",
		"FROM " + base + "@" + baseDigest + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("pinned Dockerfile lacks %q:\n%s", want, out)
		}
	}
	if bad := unpinned(out); len(bad) > 0 {
		t.Errorf("still unpinned after repin: %v", bad)
	}

	// The tag moves: only that line changes; a second run changes nothing.
	moved := push(base, false)
	out2, changed, err := repin(out, registryDigest(true))
	if err != nil {
		t.Fatal(err)
	}
	if len(changed) != 1 || !strings.Contains(changed[0], moved) || !strings.Contains(out2, base+"@"+moved) {
		t.Errorf("after the tag moved: changed %v", changed)
	}
	if _, changed, _ = repin(out2, registryDigest(true)); len(changed) != 0 {
		t.Errorf("a second run changed %v", changed)
	}

	// A tag that does not exist is an error naming the line; an ARG in the image is refused.
	if _, _, err := repin("FROM "+host+"/nope:1\n", registryDigest(true)); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("missing tag: err %v", err)
	}
	if _, _, err := repin("FROM golang:${GO_VERSION}\n", registryDigest(true)); err == nil || !strings.Contains(err.Error(), "build argument") {
		t.Errorf("ARG image: err %v", err)
	}
}
