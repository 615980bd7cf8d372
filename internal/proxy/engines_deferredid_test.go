package proxy_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// deferredIDs returns h's values of Sluice-Deferred-Id in any case, '_'
// read as '-' (as CGI and WSGI servers read header names).
func deferredIDs(h http.Header) []string {
	var ids []string
	for k, vv := range h {
		if strings.EqualFold(strings.ReplaceAll(k, "_", "-"), "Sluice-Deferred-Id") {
			ids = append(ids, vv...)
		}
	}
	return ids
}

// forgeDeferredID sets a client's own Sluice-Deferred-Id, in both
// spellings an upstream may read as it.
func forgeDeferredID(req *http.Request) {
	req.Header["Sluice-Deferred-Id"] = []string{"forged"}
	req.Header["Sluice_deferred_id"] = []string{"forged-too"}
}

// Sluice-Deferred-Id is how the upstream knows a replay of a deferred
// request: a client's own never reaches it, on any engine, by either path
// (a bodiless GET: the fast path where there is one; a POST:
// ReverseProxy), spelled with '-' or '_'.
func TestEngineDropsClientDeferredID(t *testing.T) {
	up := newRecorder(t, nil)
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		s := startOn(t, ec, up.srv.URL, engineOpts{})
		for _, m := range []struct{ method, body string }{{"GET", ""}, {"POST", "live"}} {
			req := request(t, s, m.method, "/live", m.body)
			forgeDeferredID(req)
			resp, body := s.do(t, req)
			s.wantProto(t, resp)
			if resp.StatusCode != 200 {
				t.Fatalf("%s: %d %s, want 200", m.method, resp.StatusCode, body)
			}
			got, _ := up.last(t)
			if ids := deferredIDs(got.Header); ids != nil {
				t.Errorf("%s: the upstream saw Sluice-Deferred-Id %q from the client on a live request, want none", m.method, ids)
			}
		}
	})
}

// A deferred request is queued without the client's Sluice-Deferred-Id:
// its replay carries one, the id it was queued under.
func TestDeferredDropsClientDeferredID(t *testing.T) {
	srv := redistest.StartServer(t)
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		s, replayed := startDeferring(t, ec, srv.Addr, "id", nil, func(r *http.Request) bool { return r.Header.Get("Idempotency-Key") != "" })
		req := request(t, s, "POST", "/job", "second")
		forgeDeferredID(req)
		resp, body := s.do(t, req)
		var a struct {
			ID string `json:"deferred_id"`
		}
		if json.Unmarshal([]byte(body), &a); resp.StatusCode != http.StatusAccepted || a.ID == "" {
			t.Fatalf("second request: %d %s, want 202 with its id (deferred)", resp.StatusCode, body)
		}
		var h http.Header
		select {
		case h = <-replayed:
		case <-time.After(safety): // a hang detector
			t.Fatal("the deferred request was never replayed")
		}
		if ids := deferredIDs(h); len(ids) != 1 || ids[0] != a.ID {
			t.Errorf("replay: Sluice-Deferred-Id %q, want [%s] alone (the client's dropped)", ids, a.ID)
		}
	})
}
