package proxy_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/redisstore"
)

func TestStoreDown(t *testing.T) {
	srv := redistest.StartServer(t)
	store, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr}, Timeout: time.Second})
	if err != nil {
		t.Fatalf("redisstore.New: %v", err)
	}
	t.Cleanup(store.Close)
	spec := []rules.Spec{{Name: "r", Rate: "100/s"}}
	allow := start(t, setup{specs: spec, store: store, onError: "allow"})
	deny := start(t, setup{specs: spec, store: store, onError: "deny"})
	if resp, _ := get(t, deny.proxy.URL+"/", nil); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Limit") != "100" {
		t.Fatalf("with Redis up: %d, want 200 with headers", resp.StatusCode)
	}
	srv.Stop()
	if resp, _ := get(t, allow.proxy.URL+"/", nil); resp.StatusCode != 200 || allow.up.hits.Load() != 1 {
		t.Errorf("on_error allow, Redis down: %d, upstream hits %d; want 200 forwarded", resp.StatusCode, allow.up.hits.Load())
	}
	resp, body := get(t, deny.proxy.URL+"/", nil)
	if resp.StatusCode != 503 || body != "{\"error\":\"store_unavailable\"}\n" || deny.up.hits.Load() != 1 {
		t.Errorf("on_error deny, Redis down: %d %q, upstream hits %d; want 503 store_unavailable, not forwarded", resp.StatusCode, body, deny.up.hits.Load())
	}
}

func TestUpstreamDown(t *testing.T) {
	up := newUpstream(t)
	up.srv.Close()
	up.srv.URL = "http://" + refusedAddr(t) // not the closed port: the proxy's own listener could take it
	f := start(t, setup{specs: []rules.Spec{{Name: "r", Rate: "10/s"}}, up: up})
	resp, body := get(t, f.proxy.URL+"/", nil)
	if resp.StatusCode != 502 || body != "{\"error\":\"bad_gateway\"}\n" || resp.Header.Get("X-RateLimit-Remaining") != "9" {
		t.Errorf("upstream down: %d %q remaining %q, want 502 bad_gateway with the rule's headers (9 left)", resp.StatusCode, body, resp.Header.Get("X-RateLimit-Remaining"))
	}
}

func TestUpstreamTimeout(t *testing.T) {
	hung := make(chan struct{})
	up := &upstream{}
	up.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hung:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(up.srv.Close)
	t.Cleanup(func() { close(hung) })
	f := start(t, setup{specs: []rules.Spec{{Name: "r", Rate: "10/s"}}, up: up, timeout: 50 * time.Millisecond})
	resp, body := get(t, f.proxy.URL+"/", nil)
	if resp.StatusCode != 504 || body != "{\"error\":\"gateway_timeout\"}\n" {
		t.Errorf("upstream silent past ResponseHeaderTimeout: %d %q, want 504 gateway_timeout", resp.StatusCode, body)
	}
}
