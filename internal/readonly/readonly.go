// Package readonly restricts HTTP endpoints to reads: GET and HEAD pass, any other method is
// answered 405 with an Allow header. The endpoints of package election (/leader, /healthz)
// and those the CLI adds (/readyz, /metrics) share it, so that they refuse alike.
//
// It owns the method check only: it must not know of elections, routes or bodies.
package readonly

import "net/http"

// Allow reports whether r is a GET or HEAD; otherwise it answers 405 on w and returns false.
func Allow(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	return false
}

// Handler returns h restricted to GET and HEAD.
func Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if Allow(w, r) {
			h.ServeHTTP(w, r)
		}
	})
}
