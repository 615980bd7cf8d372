package proxy_test

import (
	"context"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/rules"
)

// A deferred request is replayed with the X-Forwarded-* the proxy set,
// as a forwarded one is sent with them, also when the client's Connection
// header names them: a client must not strip them (the upstream would take
// the replay for the proxy's own request, or for a client of its choosing).
// Connection names the client's own hop-by-hop headers, never the proxy's.
// Its X-Real-IP is the proxy's too, and an untrusted client's
// True-Client-IP is not queued, nor is a framing header spelled with '_'
// (Transfer_Encoding), which a CGI-style upstream reads as the header it
// spells, nor an X-Original-URL, by which some frameworks route.
func TestDeferredKeepsForwardingHeaders(t *testing.T) {
	srv := redistest.StartServer(t)
	forEngine(t, true, func(t *testing.T, ec engineCase) {
		s, replayed := startDeferring(t, ec, srv.Addr, "", nil, func(r *http.Request) bool { return r.Header.Get("Sluice-Deferred-Id") != "" })
		req := request(t, s, "POST", "/job", "second")
		req.Host = "api.example"
		req.Header.Set("Connection", "X-Forwarded-For, X-Forwarded-Host, X-Forwarded-Proto")
		req.Header.Set("X-Real-IP", "198.51.100.1")      // the proxy's own replaces it
		req.Header.Set("True-Client-IP", "198.51.100.2") // from an untrusted peer: dropped
		req.Header["Transfer_Encoding"] = []string{"chunked"}
		req.Header["X-Original-Url"] = []string{"/admin"} // a route past the request line: dropped
		if resp, body := s.do(t, req); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("second request: %d %s, want 202 (deferred)", resp.StatusCode, body)
		}
		var h http.Header
		select {
		case h = <-replayed:
		case <-time.After(safety): // a hang detector
			t.Fatal("the deferred request was never replayed")
		}
		proto := "http"
		if ec.tls {
			proto = "https"
		}
		if xff, xfh, xfp := h.Values("X-Forwarded-For"), h.Values("X-Forwarded-Host"), h.Values("X-Forwarded-Proto"); len(xff) != 1 || xff[0] != "127.0.0.1" ||
			len(xfh) != 1 || xfh[0] != "api.example" || len(xfp) != 1 || xfp[0] != proto {
			t.Errorf("replay: X-Forwarded-For %q, X-Forwarded-Host %q, X-Forwarded-Proto %q; want [127.0.0.1] [api.example] [%s], which the client's Connection named", xff, xfh, xfp, proto)
		}
		if real, tci := h.Values("X-Real-Ip"), h.Values("True-Client-Ip"); len(real) != 1 || real[0] != "127.0.0.1" || len(tci) != 0 {
			t.Errorf("replay: X-Real-IP %q, True-Client-IP %q; want [127.0.0.1] and none (the client's own)", real, tci)
		}
		if te := h.Values("Transfer_encoding"); len(te) != 0 {
			t.Errorf("replay: Transfer_Encoding %q, want none", te)
		}
		if v := h.Values("X-Original-Url"); len(v) != 0 {
			t.Errorf("replay: X-Original-URL %q, want none", v)
		}
	})
}

// startDeferring starts the proxy on ec with one rule, jobs (1/m, action
// defer), whose requests a deferral queue on the Redis at addr (its keys
// under prefix and ec's name) replays to a recording upstream as soon as
// they are queued; it sends the first request (admitted) and returns the
// proxy and the headers of each request the upstream receives that
// replayed says is a replay. trusted: the proxy's
// client_ip.trusted_proxies.
func startDeferring(t *testing.T, ec engineCase, addr, prefix string, trusted []netip.Prefix, replayed func(*http.Request) bool) (*eserved, chan http.Header) {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	got := make(chan http.Header, 1)
	up := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		if replayed(r) {
			got <- r.Header.Clone()
		}
	})
	upURL, err := url.Parse(up.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	q, err := deferq.New(deferq.Options{Client: c, Upstream: upURL,
		Prefix: prefix + strings.NewReplacer(" ", "", "(", "", ")", "", ",", "", "/", "").Replace(ec.name)})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs", Take: func(context.Context, []string) (sluice.Decision, error) {
		return sluice.Decision{Allowed: true}, nil
	}}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	s := startOn(t, ec, up.srv.URL, engineOpts{specs: []rules.Spec{{Name: "jobs", Rate: "1/m", Action: "defer"}},
		proxy: proxy.Options{Defer: q, ClientIP: clientip.Resolver{Trusted: trusted}}})
	if resp, body := s.do(t, request(t, s, "POST", "/job", "first")); resp.StatusCode != 200 {
		t.Fatalf("first request: %d %s, want 200 (under the limit)", resp.StatusCode, body)
	}
	return s, got
}
