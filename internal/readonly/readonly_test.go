package readonly

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestHandler: GET and HEAD reach the handler, every other method gets 405 with Allow and
// never reaches it.
func TestHandler(t *testing.T) {
	for _, tc := range []struct {
		method string
		code   int
	}{
		{http.MethodGet, http.StatusTeapot},
		{http.MethodHead, http.StatusTeapot},
		{http.MethodPost, http.StatusMethodNotAllowed},
		{http.MethodPut, http.StatusMethodNotAllowed},
		{http.MethodDelete, http.StatusMethodNotAllowed},
		{http.MethodOptions, http.StatusMethodNotAllowed},
	} {
		reached := false
		h := Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			reached = true
			w.WriteHeader(http.StatusTeapot)
		}))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, "/x", nil))
		if rec.Code != tc.code {
			t.Errorf("%s: status %d, want %d", tc.method, rec.Code, tc.code)
		}
		if refused := tc.code == http.StatusMethodNotAllowed; refused == reached || refused && rec.Header().Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: reached the handler %v, Allow %q", tc.method, reached, rec.Header().Get("Allow"))
		}
	}
}
