package server_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
)

func fuzzHandler(f *testing.F) http.Handler {
	// Without the delay rule: forward-auth would hold requests in real time.
	set, err := rules.Compile("fuzz.yaml", testSpecs[:3])
	if err != nil {
		f.Fatal(err)
	}
	e, err := engine.New(engine.Options{Store: memstore.New(memstore.Options{MaxKeys: 1 << 12}), Rules: set, Metrics: metrics.New(prometheus.NewRegistry())})
	if err != nil {
		f.Fatal(err)
	}
	h, err := server.New(server.Options{Engine: func() *engine.Engine { return e }})
	if err != nil {
		f.Fatal(err)
	}
	return h
}

// Whatever the body, /v1/check answers 200 with a decision or 4xx with a
// JSON error: never a 5xx, never a non-JSON body.
func FuzzCheckBody(f *testing.F) {
	for _, s := range []string{
		`{"rule":"api","key":"k"}`, `{"rule":"api","key":"k","cost":3}`, `{"rule":"watch","key":"s","cost":0}`,
		`{"rule":"api","key":"k","cost":-1}`, `{"rule":"api","key":""}`, `{"rule":"nope","key":"k"}`,
		`{"rule":"api","key":"k"}{}`, `[]`, `null`, `{"rule":"api","key":"k","cost":1e3}`, `{"rule":"api","key":"k","cost":9223372036854775807}`,
		`{"rule":"api","rule":"login-per-ip","key":"\u0000"}`, "", "{", `{"key":"k","rule":"login-per-ip","cost":2}`,
	} {
		f.Add(s)
	}
	h := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/check", strings.NewReader(body)))
		var v map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
			t.Fatalf("POST /v1/check %q: %d answer %q is not JSON: %v", body, rec.Code, rec.Body, err)
		}
		switch {
		case rec.Code == 200:
			if _, ok := v["allowed"].(bool); !ok {
				t.Errorf("POST /v1/check %q: 200 without allowed: %v", body, v)
			}
		case rec.Code >= 400 && rec.Code < 500:
			if _, ok := v["error"].(string); !ok {
				t.Errorf("POST /v1/check %q: %d without error: %v", body, rec.Code, v)
			}
		default:
			t.Errorf("POST /v1/check %q: status %d, want 200 or 4xx", body, rec.Code)
		}
	})
}

// Whatever the forwarded method and URI (in either spelling, or both),
// forward-auth answers 200, the limited status, or 400: never a 5xx; and
// two spellings that disagree are always 400.
func FuzzForwardAuth(f *testing.F) {
	for _, s := range [][4]string{{"POST", "/login", "", ""}, {"GET", "/watch/x?y=1", "", ""}, {"", "/", "", ""}, {"get", "//a/../login", "", ""},
		{"POST", "http://host/login", "", ""}, {"x y", "%zz", "", ""}, {"POST", "*", "", ""}, {"PUT", "/slow#frag", "", ""},
		{"", "", "POST", "/login"}, {"GET", "/other", "POST", "/login"}, {"POST", "/login", "post", "/login#x"}, {"", "/login", "", "/login?"}} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	h := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, method, uri, origMethod, origURI string) {
		req := httptest.NewRequest("GET", "/v1/forward-auth", nil)
		for k, v := range map[string]string{"X-Forwarded-Method": method, "X-Forwarded-Uri": uri, "X-Original-Method": origMethod, "X-Original-Uri": origURI} {
			if v != "" {
				req.Header[k] = []string{v}
			}
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 && rec.Code != 429 && rec.Code != 400 {
			t.Errorf("forward-auth %q %q (X-Original: %q %q): status %d %q, want 200, 429 or 400", method, uri, origMethod, origURI, rec.Code, rec.Body)
		}
		u, _, _ := strings.Cut(uri, "#")
		ou, _, _ := strings.Cut(origURI, "#")
		if (uri != "" && origURI != "" && u != ou || method != "" && origMethod != "" && !strings.EqualFold(method, origMethod)) && rec.Code != 400 {
			t.Errorf("forward-auth %q %q beside X-Original %q %q: status %d, want 400 (they disagree)", method, uri, origMethod, origURI, rec.Code)
		}
	})
}
