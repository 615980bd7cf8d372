package server_test

import (
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
)

// A gateway that sends X-Forwarded-For from an address trusted_proxies
// does not list (Sluice in another container than the gateway, say) has
// every client counted as itself: say so in the log, once per gateway,
// naming it; say nothing for a listed gateway, or one that sends none.
func TestForwardAuthWarnsOfUntrustedGateway(t *testing.T) {
	for _, tc := range []struct {
		name    string
		trusted []netip.Prefix
		xff     bool
		warn    bool
	}{
		{"unlisted gateway with X-Forwarded-For", nil, true, true},
		{"unlisted gateway without X-Forwarded-For", nil, false, false},
		{"listed gateway", []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, true, false},
		{"listed gateway, client on its own address", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := new(redistest.SyncBuffer)
			f := start(t, memstore.New(memstore.Options{}), "", func(o *server.Options) {
				o.ClientIP = clientip.Resolver{Trusted: tc.trusted}
				o.Logger = slog.New(slog.NewTextHandler(logs, nil))
			})
			for _, client := range []string{"203.0.113.9", "127.0.0.1", "198.51.100.1"} {
				hdr := map[string]string{"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/login"}
				if tc.xff {
					hdr["X-Forwarded-For"] = client
				}
				if resp, body := forwardAuth(t, f, hdr); resp.StatusCode != 200 && resp.StatusCode != 429 {
					t.Fatalf("forward-auth: %d %q", resp.StatusCode, body)
				}
			}
			got := strings.Count(logs.String(), "trusted_proxies")
			switch {
			case tc.warn && (got != 1 || !strings.Contains(logs.String(), "gateway=127.0.0.1")):
				t.Errorf("log %q: want one line about trusted_proxies naming gateway=127.0.0.1", logs.String())
			case !tc.warn && got != 0:
				t.Errorf("log %q: want nothing about trusted_proxies", logs.String())
			}
		})
	}
}

// A gateway that sends no method header (nginx's auth_request with only
// X-Original-URI set, as nginx's own example writes it) has its requests
// matched as the auth request's method, GET: a rule for POST /login then
// never applies, and nothing said so. Say so in the log, once per
// gateway, naming it; say nothing when the method is sent.
func TestForwardAuthWarnsOfMissingMethod(t *testing.T) {
	for _, tc := range []struct {
		name string
		hdr  map[string]string
		warn bool
	}{
		{"X-Original-URI alone", map[string]string{"X-Original-URI": "/login"}, true},
		{"X-Forwarded-Uri alone", map[string]string{"X-Forwarded-Uri": "/login"}, true},
		{"X-Forwarded-Method", map[string]string{"X-Forwarded-Uri": "/login", "X-Forwarded-Method": "POST"}, false},
		{"X-Original-Method", map[string]string{"X-Original-URI": "/login", "X-Original-Method": "POST"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := new(redistest.SyncBuffer)
			f := start(t, memstore.New(memstore.Options{}), "", func(o *server.Options) {
				o.Logger = slog.New(slog.NewTextHandler(logs, nil))
			})
			for range 3 {
				if resp, body := forwardAuth(t, f, tc.hdr); resp.StatusCode != 200 && resp.StatusCode != 429 {
					t.Fatalf("forward-auth: %d %q", resp.StatusCode, body)
				}
			}
			got := strings.Count(logs.String(), "X-Forwarded-Method")
			switch {
			case tc.warn && (got != 1 || !strings.Contains(logs.String(), "gateway=127.0.0.1") || !strings.Contains(logs.String(), "method=GET")):
				t.Errorf("log %q: want one line about the missing X-Forwarded-Method naming gateway=127.0.0.1 and method=GET", logs.String())
			case !tc.warn && got != 0:
				t.Errorf("log %q: want nothing about X-Forwarded-Method", logs.String())
			}
		})
	}
}
