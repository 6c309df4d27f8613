// Command image builds an OCI image without Docker: a static binary on a minimal root file
// system that matches the Dockerfile's final stage (gcr.io/distroless/static:nonroot): the
// binary at /elector, the "nonroot" user 65532 in /etc/passwd, the CA certificates, /tmp and
// the nonroot home as the working directory. It writes a docker-archive tarball that
// `ctr images import` (and `docker load`) accept. The Kubernetes e2e (hack/k8s-e2e.sh) runs
// its pods on exactly these images; image_test.go checks the defaults against the Dockerfile.
//
// Usage:
//
//	go run . -binary ../../bin/elector -tag localhost/elector:e2e -o elector.tar
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Defaults of the Dockerfile's final stage and of its base image, distroless static:nonroot.
const (
	defaultBinaryPath = "/elector"
	defaultUser       = "65532:65532"
	defaultWorkdir    = "/home/nonroot"
	defaultCABundle   = "/etc/ssl/certs/ca-certificates.crt"
)

// Spec describes the image to build.
type Spec struct {
	// Binary is the host path of the static binary.
	Binary string
	// BinaryPath is where the binary lands in the image; the entrypoint runs it.
	BinaryPath string
	// Entrypoint defaults to [BinaryPath].
	Entrypoint []string
	// User is "uid:gid", numeric so that runAsNonRoot can verify it.
	User string
	// Workdir is the working directory.
	Workdir string
	// ExposedPorts such as "8080/tcp"; the Dockerfile exposes none.
	ExposedPorts []string
	// CABundle is the host file copied to /etc/ssl/certs/ca-certificates.crt; "" for none.
	CABundle string
	// Files are extra host files, "host-path:image-path".
	Files []string
	// Created is the image's creation time (the epoch by default, for reproducible images).
	Created time.Time
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var spec Spec
	var out, tag, entrypoint string
	var expose, files listFlag
	flag.StringVar(&spec.Binary, "binary", "", "host path of the static binary (required)")
	flag.StringVar(&spec.BinaryPath, "path", defaultBinaryPath, "path of the binary in the image")
	flag.StringVar(&entrypoint, "entrypoint", "", "comma-separated entrypoint (default: the binary)")
	flag.StringVar(&spec.User, "user", defaultUser, "numeric uid:gid")
	flag.StringVar(&spec.Workdir, "workdir", defaultWorkdir, "working directory")
	flag.Var(&expose, "expose", "exposed port such as 8080/tcp (repeatable)")
	flag.StringVar(&spec.CABundle, "ca", defaultCABundle, "host CA bundle to copy; empty for none")
	flag.Var(&files, "file", "extra file host-path:image-path (repeatable)")
	flag.StringVar(&tag, "tag", "", "image reference, e.g. localhost/elector:e2e (required)")
	flag.StringVar(&out, "o", "", "output docker-archive tarball (required)")
	flag.Parse()
	if entrypoint != "" {
		spec.Entrypoint = strings.Split(entrypoint, ",")
	}
	spec.ExposedPorts, spec.Files = expose, files
	if err := run(spec, tag, out); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(spec Spec, tag, out string) error {
	if spec.Binary == "" || tag == "" || out == "" {
		return errors.New("-binary, -tag and -o are required")
	}
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("-tag %q: %w", tag, err)
	}
	img, err := Build(spec)
	if err != nil {
		return err
	}
	if err := tarball.WriteToFile(out, ref, img); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	return nil
}

// Build returns the image of spec.
func Build(spec Spec) (v1.Image, error) {
	uid, gid, err := parseUser(spec.User)
	if err != nil {
		return nil, err
	}
	layer, err := rootfs(spec, uid, gid)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, fmt.Errorf("append the layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("read the config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: spec.Created.UTC()}
	entry := spec.Entrypoint
	if len(entry) == 0 {
		entry = []string{spec.BinaryPath}
	}
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if spec.CABundle != "" {
		env = append(env, "SSL_CERT_FILE="+defaultCABundle)
	}
	cf.Config = v1.Config{
		User:       spec.User,
		Entrypoint: entry,
		WorkingDir: spec.Workdir,
		Env:        env,
	}
	if len(spec.ExposedPorts) > 0 {
		cf.Config.ExposedPorts = map[string]struct{}{}
		for _, p := range spec.ExposedPorts {
			cf.Config.ExposedPorts[p] = struct{}{}
		}
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("set the config: %w", err)
	}
	return img, nil
}

func parseUser(u string) (uid, gid int, err error) {
	if _, err := fmt.Sscanf(u, "%d:%d", &uid, &gid); err != nil || fmt.Sprintf("%d:%d", uid, gid) != u {
		return 0, 0, fmt.Errorf("-user %q: want numeric uid:gid such as 65532:65532", u)
	}
	return uid, gid, nil
}

type entry struct {
	hdr  tar.Header
	body []byte
}

// rootfs is the one layer: distroless/static's files that matter, and the binary.
func rootfs(spec Spec, uid, gid int) (v1.Layer, error) {
	var entries []entry
	dir := func(p string, mode int64, u, g int) {
		entries = append(entries, entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(p, "/") + "/", Mode: mode, Uid: u, Gid: g}})
	}
	file := func(p string, mode int64, body []byte) {
		entries = append(entries, entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(p, "/"), Mode: mode, Size: int64(len(body))}, body: body})
	}
	dirs := map[string]bool{}
	parents := func(p string) {
		var chain []string
		for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
			chain = append(chain, d)
		}
		for i := len(chain) - 1; i >= 0; i-- {
			if !dirs[chain[i]] {
				dirs[chain[i]] = true
				dir(chain[i], 0o755, 0, 0)
			}
		}
	}
	for _, d := range []string{"/etc", "/etc/ssl", "/etc/ssl/certs", "/home", "/root", "/var", "/tmp"} {
		dirs[d] = true
		mode := int64(0o755)
		switch d {
		case "/tmp":
			mode = 0o1777
		case "/root":
			mode = 0o700
		}
		dir(d, mode, 0, 0)
	}
	home := spec.Workdir
	if home != "" && home != "/" {
		parents(home + "/x")
		dirs[home] = true
		// The working directory belongs to the image's user, as distroless' /home/nonroot.
		for i := range entries {
			if "/"+strings.TrimSuffix(entries[i].hdr.Name, "/") == home {
				entries[i].hdr.Uid, entries[i].hdr.Gid, entries[i].hdr.Mode = uid, gid, 0o700
			}
		}
	}
	file("/etc/passwd", 0o644, []byte(fmt.Sprintf(
		"root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:%d:%d:nonroot:%s:/sbin/nologin\n", uid, gid, home)))
	file("/etc/group", 0o644, []byte(fmt.Sprintf("root:x:0:\nnobody:x:65534:\nnonroot:x:%d:\n", gid)))
	file("/etc/nsswitch.conf", 0o644, []byte("hosts: files dns\n"))
	if spec.CABundle != "" {
		ca, err := os.ReadFile(spec.CABundle)
		if err != nil {
			return nil, fmt.Errorf("-ca: %w", err)
		}
		file(defaultCABundle, 0o644, ca)
	}
	bin, err := os.ReadFile(spec.Binary)
	if err != nil {
		return nil, fmt.Errorf("-binary: %w", err)
	}
	parents(spec.BinaryPath)
	file(spec.BinaryPath, 0o755, bin)
	for _, f := range spec.Files {
		src, dst, ok := strings.Cut(f, ":")
		if !ok || !path.IsAbs(dst) {
			return nil, fmt.Errorf("-file %q: want host-path:/image-path", f)
		}
		body, err := os.ReadFile(src)
		if err != nil {
			return nil, fmt.Errorf("-file: %w", err)
		}
		st, err := os.Stat(src)
		if err != nil {
			return nil, fmt.Errorf("-file: %w", err)
		}
		parents(dst)
		file(dst, int64(st.Mode().Perm()), body)
	}
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].hdr.Name < entries[j].hdr.Name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		e.hdr.ModTime = spec.Created
		e.hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(&e.hdr); err != nil {
			return nil, fmt.Errorf("tar %s: %w", e.hdr.Name, err)
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, fmt.Errorf("tar %s: %w", e.hdr.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("tar: %w", err)
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	return layer, nil
}
