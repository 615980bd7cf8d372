package deferq

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestWrongMethod: GET /v1/deferred/ID answers another method 405 as every
// endpoint of the decision API does: Allow, a JSON error worded alike,
// and nosniff. The method is checked before Redis is asked.
func TestWrongMethod(t *testing.T) {
	w := httptest.NewRecorder()
	(&Queue{}).ServeHTTP(w, httptest.NewRequest("DELETE", StatusPath+"x", nil))
	if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "GET, HEAD" ||
		w.Header().Get("X-Content-Type-Options") != "nosniff" || w.Body.String() != `{"error":"method not allowed (want GET, HEAD)"}`+"\n" {
		t.Errorf("DELETE /v1/deferred/x: %d, headers %v, body %q; want 405, Allow GET, HEAD, nosniff, the decision API's wording", w.Code, w.Header(), w.Body.String())
	}
}
