package main

import (
	"archive/tar"
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// dockerfileStage is what the final stage of the Dockerfile declares.
type dockerfileStage struct {
	base       string
	user       string
	entrypoint []string
	workdir    string
	expose     []string
	copies     []string // destinations of COPY
}

// The base image's own config, which the final stage inherits where it declares nothing:
// gcr.io/distroless/static:nonroot runs in /home/nonroot as 65532.
var baseImages = map[string]dockerfileStage{
	"gcr.io/distroless/static:nonroot": {user: "65532", workdir: "/home/nonroot"},
}

func parseDockerfile(t *testing.T, p string) dockerfileStage {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st dockerfileStage
	sc := bufio.NewScanner(f)
	var line string
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			line += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		line += l
		fields := strings.Fields(line)
		line = ""
		if len(fields) == 0 {
			continue
		}
		rest := strings.Join(fields[1:], " ")
		switch strings.ToUpper(fields[0]) {
		case "FROM":
			st = dockerfileStage{base: fields[len(fields)-1]}
			if len(fields) >= 4 && strings.EqualFold(fields[len(fields)-2], "AS") {
				st.base = fields[len(fields)-3]
			}
			st.base, _, _ = strings.Cut(st.base, "@") // the digest pins the tag named here
			if b, ok := baseImages[st.base]; ok {
				st.user, st.workdir = b.user, b.workdir
			}
		case "USER":
			st.user = rest
		case "WORKDIR":
			st.workdir = rest
		case "EXPOSE":
			for _, p := range fields[1:] {
				if !strings.Contains(p, "/") {
					p += "/tcp"
				}
				st.expose = append(st.expose, p)
			}
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &st.entrypoint); err != nil {
				t.Fatalf("ENTRYPOINT %s: only the exec form is supported: %v", rest, err)
			}
		case "COPY":
			st.copies = append(st.copies, fields[len(fields)-1])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestMatchesDockerfile builds the image with the defaults and compares its config with what
// the Dockerfile's final stage declares (and inherits from distroless), so the image the e2e
// runs cannot drift from the released one.
func TestMatchesDockerfile(t *testing.T) {
	df := parseDockerfile(t, filepath.Join("..", "..", "Dockerfile"))
	if _, ok := baseImages[df.base]; !ok {
		t.Fatalf("the Dockerfile's final stage is FROM %s; teach this test (and the image builder) its config", df.base)
	}
	bin := filepath.Join(t.TempDir(), "elector")
	if err := os.WriteFile(bin, []byte("#!binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	img, err := Build(Spec{Binary: bin, BinaryPath: defaultBinaryPath, User: defaultUser, Workdir: defaultWorkdir, CABundle: caOrEmpty(t)})
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != df.user {
		t.Errorf("user %q, the Dockerfile says %q", c.User, df.user)
	}
	if !reflect.DeepEqual(c.Entrypoint, df.entrypoint) {
		t.Errorf("entrypoint %q, the Dockerfile says %q", c.Entrypoint, df.entrypoint)
	}
	if c.WorkingDir != df.workdir {
		t.Errorf("workdir %q, the Dockerfile's stage has %q", c.WorkingDir, df.workdir)
	}
	var ports []string
	for p := range c.ExposedPorts {
		ports = append(ports, p)
	}
	sort.Strings(ports)
	sort.Strings(df.expose)
	if strings.Join(ports, ",") != strings.Join(df.expose, ",") {
		t.Errorf("exposed ports %q, the Dockerfile exposes %q", ports, df.expose)
	}
	if len(df.copies) != 1 || df.copies[0] != defaultBinaryPath {
		t.Errorf("the Dockerfile copies to %q, the image has the binary at %s", df.copies, defaultBinaryPath)
	}
	if cf.OS != "linux" || cf.Architecture == "" {
		t.Errorf("platform %s/%s", cf.OS, cf.Architecture)
	}

	// The files: the binary executable, the user in /etc/passwd, the CA bundle, /tmp.
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]*tar.Header{}
	bodies := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files["/"+strings.TrimSuffix(h.Name, "/")] = h
		b, _ := io.ReadAll(tr)
		bodies["/"+h.Name] = string(b)
	}
	if h := files[defaultBinaryPath]; h == nil || h.Mode&0o111 == 0 {
		t.Errorf("binary %s missing or not executable: %+v", defaultBinaryPath, h)
	}
	if !strings.Contains(bodies["/etc/passwd"], "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot 65532: %q", bodies["/etc/passwd"])
	}
	if h := files["/tmp"]; h == nil || h.Mode&0o1777 != 0o1777 {
		t.Errorf("/tmp missing or not 1777: %+v", h)
	}
	if h := files[df.workdir]; h == nil || h.Uid != 65532 {
		t.Errorf("workdir %s missing or not owned by 65532: %+v", df.workdir, h)
	}
	if caOrEmpty(t) != "" && files[defaultCABundle] == nil {
		t.Errorf("CA bundle %s missing", defaultCABundle)
	}
}

func caOrEmpty(t *testing.T) string {
	if _, err := os.Stat(defaultCABundle); err != nil {
		t.Logf("no %s on this host: the image is built without CA certificates", defaultCABundle)
		return ""
	}
	return defaultCABundle
}

func TestBadUser(t *testing.T) {
	for _, u := range []string{"nonroot", "65532", "65532:x", ""} {
		if _, err := Build(Spec{Binary: "x", User: u}); err == nil || !strings.Contains(err.Error(), "-user") {
			t.Errorf("user %q: err %v, want one naming -user", u, err)
		}
	}
}
