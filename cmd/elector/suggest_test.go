package main

import "testing"

func TestEditDistance(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"run", "run", 0}, {"", "run", 3}, {"run", "", 3},
		{"rnu", "run", 1},       // a swap of neighbours is one edit
		{"statsu", "status", 1}, // also at the end
		{"sidecra", "sidecar", 1},
		{"resing", "resign", 1},
		{"ab", "ba", 1},
		{"abc", "ca", 3},         // optimal string alignment: no edit of a swapped pair
		{"kitten", "sitting", 3}, // Levenshtein's classic
	} {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestSuggestCommand(t *testing.T) {
	for word, want := range map[string]string{
		"rnu": "run", "statsu": "status", "sidcar": "sidecar", "resing": "resign", "xyz": "",
	} {
		var names []string
		for _, c := range commands() {
			names = append(names, c.name)
		}
		if got := suggest(word, names); got != want {
			t.Errorf("suggest(%q) = %q, want %q", word, got, want)
		}
	}
}
