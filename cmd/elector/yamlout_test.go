package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// -o yaml lists the keys in the order -o json does (issue 28 item 13: YAML came sorted), and
// its values read back as the JSON's.
func TestYAMLKeepsJSONOrder(t *testing.T) {
	terms := int64(7)
	s := leaseStatus{Lease: "nightly", Key: "elector:{nightly}:lease", Holder: "pod-b", Instance: "i1", Token: 1733, TTLMs: 1234, Transitions: &terms}
	var js, ys bytes.Buffer
	if err := encode(&js, "json", s); err != nil {
		t.Fatal(err)
	}
	if err := encode(&ys, "yaml", s); err != nil {
		t.Fatal(err)
	}
	var jsonKeys, yamlKeys []string
	for _, m := range regexp.MustCompile(`"([a-zA-Z]+)":`).FindAllStringSubmatch(js.String(), -1) {
		jsonKeys = append(jsonKeys, m[1])
	}
	for _, line := range strings.Split(ys.String(), "\n") {
		if k, _, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(k, " ") {
			yamlKeys = append(yamlKeys, k)
		}
	}
	if strings.Join(jsonKeys, ",") != strings.Join(yamlKeys, ",") || len(jsonKeys) < 5 {
		t.Errorf("yaml keys %v, want the json order %v\nyaml:\n%s", yamlKeys, jsonKeys, ys.String())
	}
	for _, want := range []string{"token: 1733\n", "holder: pod-b\n", "transitions: 7\n"} {
		if !strings.Contains(ys.String(), want) {
			t.Errorf("yaml lacks %q:\n%s", want, ys.String())
		}
	}
}
