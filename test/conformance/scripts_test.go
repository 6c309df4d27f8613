package conformance

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/elector/elector/internal/leasewire/lualib"
)

// protocolScripts are the scripts a client of the election runs: the normative text of the
// protocol (docs/PROTOCOL.md, "Scripts").
var protocolScripts = []string{"acquire", "renew", "release", "resign"}

func read(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPythonScriptsAreTheGoScripts: the Python package ships copies of the scripts (a wheel
// cannot read the repository); they must be the files of pkg/lease byte for byte, and the
// SHA1s the client checks at start (SCRIPT_SHA1) theirs. One source of truth: pkg/lease/scripts.
func TestPythonScriptsAreTheGoScripts(t *testing.T) {
	core := string(read(t, "clients/python/elector/core.py"))
	for _, name := range protocolScripts {
		src := read(t, "pkg/lease/scripts/"+name+".lua")
		if cp := read(t, "clients/python/elector/lua/"+name+".lua"); !bytes.Equal(cp, src) {
			t.Errorf("clients/python/elector/lua/%s.lua differs from pkg/lease/scripts/%s.lua: copy it (cp pkg/lease/scripts/%s.lua clients/python/elector/lua/)", name, name, name)
		}
		sum := sha1.Sum(src)
		want := `"` + name + `": "` + hex.EncodeToString(sum[:]) + `"`
		if !strings.Contains(core, want) {
			t.Errorf("clients/python/elector/core.py: SCRIPT_SHA1 must hold %s", want)
		}
	}
}

// TestProtocolDocNamesTheScripts: docs/PROTOCOL.md references the scripts as the protocol's
// normative text by their SHA1s and the function library by its version; a changed script
// must change the document (and, for the election's scripts, the protocol version).
func TestProtocolDocNamesTheScripts(t *testing.T) {
	doc := string(read(t, "docs/PROTOCOL.md"))
	lines := strings.Split(doc, "\n")
	files := []string{"pkg/fence/fence.lua", "pkg/election/scripts/members.lua"}
	for _, dir := range []string{"pkg/lease/scripts", "pkg/schedule/scripts"} {
		m, _ := filepath.Glob(filepath.Join(repoRoot, dir, "*.lua"))
		for _, f := range m {
			files = append(files, dir+"/"+filepath.Base(f))
		}
	}
	for _, f := range files {
		sum := sha1.Sum(read(t, f))
		row := "`" + f + "` | `" + hex.EncodeToString(sum[:]) + "`"
		found := false
		for _, l := range lines {
			found = found || strings.Contains(l, row)
		}
		if !found {
			t.Errorf("docs/PROTOCOL.md, \"Version and scripts\": want the row %s (a script changed: update its row there, and the library version)", row)
		}
	}
	if want := "`elector_" + lualib.Version + "`"; !strings.Contains(doc, want) {
		t.Errorf("docs/PROTOCOL.md must name the function library %s", want)
	}
}
