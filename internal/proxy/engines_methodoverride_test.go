package proxy_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/rules"
)

// A POST carrying a method override (X-HTTP-Method-Override, X-HTTP-Method,
// X-Method-Override, a query _method) is counted by a rule for the method
// it names, on every engine: frameworks that read the override (Express's
// method-override, Laravel, Symfony) serve it as that method, so a client
// past a DELETE rule's limit could go on deleting by POST. The override
// still reaches the upstream: clients behind firewalls that pass only GET
// and POST need it. Here the upstream reads it as such a framework does.
func TestEngineMethodOverrideCounted(t *testing.T) {
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
			m := r.Method
			if v := r.Header.Get("X-Http-Method-Override"); m == "POST" && v != "" {
				m = v
			} else if v := r.URL.Query().Get("_method"); m == "POST" && v != "" {
				m = v
			}
			io.WriteString(w, "served "+m)
		})
		var o engineOpts
		o.specs = []rules.Spec{{Name: "deletes", Match: rules.MatchSpec{Methods: []string{"DELETE"}, Path: "/items/*"}, Rate: "1/m"}}
		s := startOn(t, ec, rec.srv.URL, o)
		if resp, body := s.do(t, request(t, s, "DELETE", "/items/1", "")); resp.StatusCode != 200 || body != "served DELETE" {
			t.Fatalf("DELETE /items/1: %d %q, want 200 (the rule's one a minute)", resp.StatusCode, body)
		}
		for _, target := range []string{"/items/2", "/items/2?_method=DELETE"} {
			req := request(t, s, "POST", target, "payload")
			if target == "/items/2" {
				req.Header.Set("X-HTTP-Method-Override", "DELETE")
			}
			resp, body := s.do(t, req)
			if resp.StatusCode != http.StatusTooManyRequests {
				t.Errorf("POST %s overridden to DELETE: %d %q, want 429 (the DELETE rule's limit spent)", target, resp.StatusCode, body)
			}
		}
		// More methods than a request is counted under: refused, before
		// the upstream sees it.
		n := rec.count()
		req := request(t, s, "POST", "/items/4", "payload")
		req.Header["X-Http-Method-Override"] = []string{"DELETE", "PUT, PATCH"}
		req.Header.Set("X-Method-Override", "OPTIONS")
		resp, body := s.do(t, req)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, `"error":"ambiguous_key"`) || !strings.Contains(body, `"part":"method"`) || !strings.Contains(body, "methods") {
			t.Errorf("POST naming 4 other methods: %d %q, want 400 ambiguous_key, part method", resp.StatusCode, body)
		}
		if rec.count() != n {
			t.Error("POST naming 4 other methods reached the upstream")
		}
		// Under the limit, the override passes on to the upstream.
		s2 := startOn(t, ec, rec.srv.URL, o)
		req = request(t, s2, "POST", "/items/3", "payload")
		req.Header.Set("X-HTTP-Method-Override", "DELETE")
		if resp, body := s2.do(t, req); resp.StatusCode != 200 || body != "served DELETE" {
			t.Errorf("POST /items/3 overridden to DELETE, first: %d %q, want 200 \"served DELETE\"", resp.StatusCode, body)
		}
		if r, _ := rec.last(t); r.Header.Get("X-Http-Method-Override") != "DELETE" {
			t.Errorf("the upstream got X-HTTP-Method-Override %q, want DELETE passed on", r.Header.Get("X-Http-Method-Override"))
		}
	})
}
