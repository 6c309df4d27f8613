package conformance

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
