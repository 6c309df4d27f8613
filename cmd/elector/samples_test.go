package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/pkg/election"
)

// docSample is one "$ elector ..." command of docs/CLI.md and the output shown under it.
type docSample struct {
	command string
	output  []string
}

// docSamples returns the samples of docs/CLI.md: in a code block, a line "$ elector ..."
// and the lines after it up to a blank line, the next command or the block's end.
func docSamples(t *testing.T) []docSample {
	t.Helper()
	b, err := os.ReadFile("../../docs/CLI.md")
	if err != nil {
		t.Fatal(err)
	}
	var samples []docSample
	var cur *docSample
	inBlock := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "```"):
			inBlock, cur = !inBlock, nil
		case !inBlock:
		case strings.HasPrefix(line, "$ elector "):
			samples = append(samples, docSample{command: strings.TrimPrefix(line, "$ ")})
			cur = &samples[len(samples)-1]
		case line == "":
			cur = nil
		case cur != nil:
			cur.output = append(cur.output, line)
		}
	}
	return samples
}

// agoRE is the part of a status line that depends on when it was printed.
var agoRE = regexp.MustCompile(`\(\S+ ago\)`)

// TestDocsSamples keeps the sample outputs of docs/CLI.md what the code prints (issue 28
// item 13: they had drifted from the binary). Each sample is parsed into the values it shows
// and printed again by the code that prints status, status --watch, status --all and resign:
// labels, field names, their order and the padding must come out as the sample has them.
// Only values that depend on the moment ("3s ago") are not compared.
func TestDocsSamples(t *testing.T) {
	samples := docSamples(t)
	kinds := map[string]int{}
	for _, s := range samples {
		if len(s.output) == 0 {
			t.Errorf("docs/CLI.md: %q shows no output", s.command)
			continue
		}
		var got, kind string
		switch {
		case strings.HasPrefix(s.output[0], "{"):
			kind, got = "json", reencodeJSON(t, s)
		case strings.HasPrefix(s.output[0], "TIME "):
			kind, got = "watch", reprintWatch(t, s)
		case strings.HasPrefix(s.output[0], "LEASE "):
			kind, got = "all", reprintAll(t, s)
		case strings.HasPrefix(s.output[0], "lease:"):
			kind, got = "text", reprintStatus(t, s)
		default:
			t.Errorf("docs/CLI.md: %q: output of an unknown form:\n%s", s.command, strings.Join(s.output, "\n"))
			continue
		}
		kinds[kind]++
		want := strings.Join(s.output, "\n") + "\n"
		if agoRE.ReplaceAllString(got, "(ago)") != agoRE.ReplaceAllString(want, "(ago)") {
			t.Errorf("docs/CLI.md: the output of %q is not what the code prints for the same values\ndocs:\n%scode:\n%s", s.command, want, got)
		}
	}
	for _, kind := range []string{"json", "watch", "all", "text"} {
		if kinds[kind] == 0 {
			t.Errorf("docs/CLI.md has no sample of the %s output; has the format of the samples changed?", kind)
		}
	}
}

// reencodeJSON decodes each line of a JSON sample into leaseStatus (refusing unknown fields)
// and encodes it again as status does.
func reencodeJSON(t *testing.T, s docSample) string {
	t.Helper()
	var out bytes.Buffer
	for _, line := range s.output {
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		var st leaseStatus
		if err := dec.Decode(&st); err != nil {
			t.Errorf("docs/CLI.md: %q: %v in %s", s.command, err, line)
			return ""
		}
		if err := encode(&out, "json", st); err != nil {
			t.Fatal(err)
		}
	}
	return out.String()
}

// reprintStatus parses a text sample of status or resign ("label:  value" lines) and prints
// its values with printStatus.
func reprintStatus(t *testing.T, s docSample) string {
	t.Helper()
	var st leaseStatus
	for _, line := range s.output {
		label, value, ok := strings.Cut(line, ":")
		if !ok {
			t.Errorf("docs/CLI.md: %q: no label in %q", s.command, line)
			continue
		}
		value = strings.TrimSpace(value)
		var err error
		switch label {
		case "lease":
			st.Lease = value
		case "key":
			st.Key = value
		case "holder":
			st.Holder = value
		case "instance":
			st.Instance = value
		case "transitions":
			var n int64
			n, err = strconv.ParseInt(value, 10, 64)
			st.Transitions = &n
		case "token":
			st.Token, err = strconv.ParseInt(value, 10, 64)
		case "acquired":
			var at time.Time
			at, err = time.Parse(time.RFC3339Nano, strings.Fields(value)[0])
			st.AcquiredAt = &at
		case "ttl":
			var d time.Duration
			d, err = time.ParseDuration(value)
			st.TTLMs = d.Milliseconds()
		default:
			t.Errorf("docs/CLI.md: %q: a label the code never prints: %q", s.command, label)
		}
		if err != nil {
			t.Errorf("docs/CLI.md: %q: %v", s.command, err)
		}
	}
	var out bytes.Buffer
	if err := printStatus(&out, st); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// reprintWatch prints the header and each row of a status --watch sample with the watcher's
// own row function.
func reprintWatch(t *testing.T, s docSample) string {
	t.Helper()
	c, stdout, _ := testCLI(nil)
	w := &statusWatcher{c: c, output: "text", text: true, holderWidth: 20}
	for _, line := range s.output {
		f := strings.Fields(line)
		if len(f) != 6 {
			t.Errorf("docs/CLI.md: %q: want 6 columns in %q", s.command, line)
			continue
		}
		if err := w.row(f[0], f[1], f[2], f[3], f[4], f[5]); err != nil {
			t.Fatal(err)
		}
	}
	return stdout.String()
}

// reprintAll prints the rows of a status --all sample with printAll.
func reprintAll(t *testing.T, s docSample) string {
	t.Helper()
	var list []leaseStatus
	for _, line := range s.output[1:] {
		f := strings.Fields(line)
		if len(f) != 5 {
			t.Errorf("docs/CLI.md: %q: want 5 columns in %q", s.command, line)
			continue
		}
		token, err1 := strconv.ParseInt(f[2], 10, 64)
		ttl, err2 := time.ParseDuration(f[3])
		at, err3 := time.Parse(time.RFC3339Nano, f[4])
		if err1 != nil || err2 != nil || err3 != nil {
			t.Errorf("docs/CLI.md: %q: %q: %v %v %v", s.command, line, err1, err2, err3)
			continue
		}
		list = append(list, leaseStatus{Lease: f[0], Holder: f[1], Token: token, TTLMs: ttl.Milliseconds(), AcquiredAt: &at})
	}
	var out bytes.Buffer
	if err := printAll(&out, list); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// TestDocsInlineSamples: the one-line text samples in docs/CLI.md's field table (reserved,
// done) and the sample answer of /leader are what the code prints, field names and order
// included.
func TestDocsInlineSamples(t *testing.T) {
	b, err := os.ReadFile("../../docs/CLI.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	finished := time.Date(2025, 11, 29, 18, 41, 0, 500_000_000, time.UTC)
	var out bytes.Buffer
	for _, st := range []leaseStatus{
		{Lease: "x", Key: "k", Reserved: &reservedStatus{Resigned: "pod-a", Target: "pod-b", TTLMs: 12400}},
		{Lease: "x", Key: "k", Done: &doneStatus{Holder: "pod-a", Token: 1764441600123456, ExitCode: 0, Finished: finished, TTLMs: 86339500}},
	} {
		if err := printStatus(&out, st); err != nil {
			t.Fatal(err)
		}
	}
	for _, line := range strings.Split(out.String(), "\n") {
		label, value, _ := strings.Cut(line, ":")
		if label != "reserved" && label != "done" {
			continue
		}
		if want := "`" + label + ": " + strings.TrimSpace(value) + "`"; !strings.Contains(doc, want) {
			t.Errorf("docs/CLI.md does not show the %s line as the code prints it: %s", label, want)
		}
	}

	// /leader: the sample's fields, in the handler's order.
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never contacted
	defer client.Close()
	e, err := election.New(election.Config{
		Client: client, LeaseName: "my-app", Identity: "pod-a",
		Callbacks: election.Callbacks{OnStartedLeading: func(context.Context) {}, OnStoppedLeading: func() {}},
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	leaderHandler(e.LeaderHandler(), nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/leader", nil))
	sample := regexp.MustCompile("(?m)^```json\n(\\{\"name\".*)\n```").FindStringSubmatch(doc)
	if sample == nil {
		t.Fatal("docs/CLI.md has no /leader sample")
	}
	keys := regexp.MustCompile(`"([a-zA-Z]+)":`)
	names := func(s string) (out []string) {
		for _, m := range keys.FindAllStringSubmatch(s, -1) {
			out = append(out, m[1])
		}
		return out
	}
	if got, want := strings.Join(names(rec.Body.String()), ","), strings.Join(names(sample[1]), ","); got != want {
		t.Errorf("/leader of a follower answers the fields %s; docs/CLI.md's sample shows %s\nanswer: %s", got, want, rec.Body.String())
	}
}
