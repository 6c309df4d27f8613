package k8s

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/elector/elector/test/k8s/cluster"
)

// testDocumentedKubectl runs, against release r (sidecar mode), every kubectl and curl
// command of docs/KUBERNETES.md and of the NOTES that `helm install` printed for r, as a user
// copies them: the docs' release name (my-app) becomes r's, a port-forward's local port a
// free one. A command of another kind in those places fails the test until it is run here
// too. test/helm runs the documents' helm commands.
func testDocumentedKubectl(t *testing.T, ctx context.Context, r *release) {
	doc, err := os.ReadFile(filepath.Join(e.repo, "docs", "KUBERNETES.md"))
	if err != nil {
		t.Fatal(err)
	}
	notes, err := e.helmCmd(ctx, "get", "notes", r.name)
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range []struct {
		name string
		cmds []docCommand
	}{
		{"docs/KUBERNETES.md", shellBlockCommands(string(doc))},
		{"NOTES", noteCommands(notes)},
	} {
		t.Run(strings.ReplaceAll(src.name, "/", "_"), func(t *testing.T) {
			if len(src.cmds) < 3 {
				t.Fatalf("%s: found only %d kubectl/curl commands: %+v; the extraction is broken", src.name, len(src.cmds), src.cmds)
			}
			runDocumented(t, ctx, r, src.name, src.cmds)
		})
	}
}

// docCommand is one command line of a document.
type docCommand struct {
	line       int
	words      []string
	background bool // ends with &
}

// shellBlockCommands returns the kubectl and curl commands of the ```sh blocks of a
// Markdown document.
func shellBlockCommands(md string) []docCommand {
	var out []docCommand
	in := false
	for i, l := range strings.Split(md, "\n") {
		switch {
		case strings.HasPrefix(l, "```"):
			in = !in && strings.TrimPrefix(l, "```") == "sh"
		case in:
			if c, ok := parseCommand(i+1, l); ok {
				out = append(out, c)
			}
		}
	}
	return out
}

// noteCommands returns the kubectl and curl commands of helm's NOTES (indented lines).
func noteCommands(notes string) []docCommand {
	var out []docCommand
	for i, l := range strings.Split(notes, "\n") {
		if c, ok := parseCommand(i+1, l); ok {
			out = append(out, c)
		}
	}
	return out
}

// parseCommand splits a kubectl or curl command line into words: single quotes group, a
// trailing # comment and & are dropped.
func parseCommand(n int, l string) (docCommand, bool) {
	l = strings.TrimSpace(l)
	if !strings.HasPrefix(l, "kubectl ") && !strings.HasPrefix(l, "curl ") {
		return docCommand{}, false
	}
	if i := strings.Index(l, " #"); i >= 0 {
		l = l[:i]
	}
	c := docCommand{line: n}
	l = strings.TrimSpace(l)
	if strings.HasSuffix(l, "&") {
		c.background = true
		l = strings.TrimSpace(strings.TrimSuffix(l, "&"))
	}
	var w strings.Builder
	quoted, inWord := false, false
	for _, r := range l {
		switch {
		case r == '\'':
			quoted, inWord = !quoted, true
		case r == ' ' && !quoted:
			if inWord {
				c.words = append(c.words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		c.words = append(c.words, w.String())
	}
	return c, true
}

// runDocumented runs cmds in order; a port-forward runs until the end.
func runDocumented(t *testing.T, ctx context.Context, r *release, src string, cmds []docCommand) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	localPort := map[string]string{} // the document's local port → the free port used
	for _, c := range cmds {
		where := fmt.Sprintf("%s:%d `%s`", src, c.line, strings.Join(c.words, " "))
		words := make([]string, len(c.words))
		for i, w := range c.words {
			words[i] = strings.ReplaceAll(w, "my-app", r.name)
		}
		switch {
		case words[0] == "kubectl" && slices.Index(words, "port-forward") > 0 && c.background:
			i := len(words) - 1
			local, remote, ok := strings.Cut(words[i], ":")
			if !ok {
				t.Fatalf("%s: no LOCAL:REMOTE port", where)
			}
			port, err := cluster.FreePort("127.0.0.1")
			if err != nil {
				t.Fatal(err)
			}
			localPort[local] = strconv.Itoa(port)
			words[i] = localPort[local] + ":" + remote
			cmd := e.c.KubectlCmd(ctx, words[1:]...)
			if err := cmd.Start(); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			t.Cleanup(func() { cancel(); _ = cmd.Wait() })
		case words[0] == "kubectl" && !c.background:
			out, err := e.c.Kubectl(ctx, words[1:]...)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			if strings.TrimSpace(out) == "" {
				t.Errorf("%s printed nothing", where)
			}
			t.Logf("%s:\n%s", where, firstLines(out, 5))
			if len(words) > 3 && words[1] == "create" && words[2] == "secret" {
				name := words[4]
				t.Cleanup(func() { _, _ = e.c.Kubectl(context.Background(), "delete", "secret", name) })
			}
		case words[0] == "curl" && !c.background:
			url := words[len(words)-1]
			for doc, port := range localPort {
				url = strings.Replace(url, "127.0.0.1:"+doc+"/", "127.0.0.1:"+port+"/", 1)
			}
			checkLeaderURL(t, ctx, r, where, url)
		default:
			t.Errorf("%s: a documented command this test does not run; add it here", where)
		}
	}
}

// checkLeaderURL GETs a /leader URL through the port-forward (retrying while it starts): the
// answer names the lease's holder as leader.
func checkLeaderURL(t *testing.T, ctx context.Context, r *release, where, url string) {
	t.Helper()
	if !strings.HasSuffix(url, "/leader") {
		t.Fatalf("%s: only /leader is checked", where)
	}
	var st struct {
		Name     string `json:"name"`
		Identity string `json:"identity"`
	}
	err := waitUntil(ctx, 30*time.Second, func() error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := httpClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			return err
		}
		holder, _, err := e.holder(ctx, r)
		if err != nil {
			return err
		}
		if st.Name == "" || st.Name != holder || st.Identity == "" {
			return fmt.Errorf("/leader says leader %q (identity %q), the lease's holder is %q", st.Name, st.Identity, holder)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	t.Logf("%s: leader %s, answered by %s", where, st.Name, st.Identity)
}

func firstLines(s string, n int) string {
	sc := bufio.NewScanner(strings.NewReader(s))
	var out []string
	for len(out) < n && sc.Scan() {
		out = append(out, sc.Text())
	}
	return strings.Join(out, "\n")
}
