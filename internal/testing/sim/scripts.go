package sim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Scripts are the sources of the project's Lua scripts, read from the files the production
// packages embed, so that the simulation runs exactly what ships.
type Scripts struct {
	Acquire, Renew, Release, Resign, Done string // pkg/lease/scripts
	Candidate, RenewMany                  string // pkg/lease/scripts
	Members                               string // pkg/election/scripts
}

// LoadScripts reads the scripts from the module containing the working directory.
func LoadScripts() (Scripts, error) {
	root, err := moduleRoot()
	if err != nil {
		return Scripts{}, err
	}
	var s Scripts
	for _, f := range []struct {
		dst  *string
		path string
	}{
		{&s.Acquire, "pkg/lease/scripts/acquire.lua"},
		{&s.Renew, "pkg/lease/scripts/renew.lua"},
		{&s.Release, "pkg/lease/scripts/release.lua"},
		{&s.Resign, "pkg/lease/scripts/resign.lua"},
		{&s.Done, "pkg/lease/scripts/done.lua"},
		{&s.Candidate, "pkg/lease/scripts/candidate.lua"},
		{&s.RenewMany, "pkg/lease/scripts/renew_many.lua"},
		{&s.Members, "pkg/election/scripts/members.lua"},
	} {
		b, err := os.ReadFile(filepath.Join(root, f.path))
		if err != nil {
			return Scripts{}, fmt.Errorf("load simulator scripts: %w", err)
		}
		*f.dst = string(b)
	}
	return s, nil
}

// moduleRoot is the nearest directory at or above the working directory with a go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find module root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find module root: no go.mod above the working directory")
		}
		dir = parent
	}
}
