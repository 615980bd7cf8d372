package hotkeys

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestWrongMethod: GET /v1/hotkeys answers another method 405 as every
// endpoint of the decision API does: Allow, a JSON error worded alike,
// and nosniff.
func TestWrongMethod(t *testing.T) {
	w := httptest.NewRecorder()
	NewSet(Options{}, 0, 0).ServeHTTP(w, httptest.NewRequest("POST", "/v1/hotkeys", nil))
	if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "GET, HEAD" ||
		w.Header().Get("X-Content-Type-Options") != "nosniff" || w.Body.String() != `{"error":"method not allowed (want GET, HEAD)"}`+"\n" {
		t.Errorf("POST /v1/hotkeys: %d, headers %v, body %q; want 405, Allow GET, HEAD, nosniff, the decision API's wording", w.Code, w.Header(), w.Body.String())
	}
}
