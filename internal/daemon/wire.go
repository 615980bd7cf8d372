package daemon

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/internal/clientip"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/rules"
)

// build makes the handlers of one config generation over the daemon's
// store and metrics.
func (d *Daemon) build(cfg *Config) (*generation, error) {
	set, err := cfg.RuleSet()
	if err != nil {
		return nil, err
	}
	eng, err := engine.New(engine.Options{Store: d.store, Rules: set, OnError: cfg.Store.OnError, Metrics: d.metrics, Logger: d.log})
	if err != nil {
		return nil, err
	}
	gen := &generation{cfg: cfg, rules: set}
	ips := clientip.Resolver{Trusted: cfg.ClientIP.TrustedProxies}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		if err := d.ping(ctx); err != nil {
			http.Error(w, "store unreachable", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /v1/rules", func(w http.ResponseWriter, r *http.Request) {
		var names []map[string]string
		for _, r := range set.Rules {
			names = append(names, map[string]string{"name": r.Name})
		}
		json.NewEncoder(w).Encode(map[string]any{"rules": names})
	})
	mux.HandleFunc("POST /v1/check", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Rule string `json:"rule"`
			Key  string `json:"key"`
			Cost *int64 `json:"cost"`
		}
		bad := func(msg string) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(map[string]string{"error": msg})
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil {
			bad("bad json")
			return
		}
		rule := set.Rule(req.Rule)
		if rule == nil {
			bad("no such rule")
			return
		}
		cost := int64(1)
		if req.Cost != nil {
			cost = *req.Cost
		}
		if cost < 0 {
			bad("negative cost")
			return
		}
		res := eng.Decide(r.Context(), []rules.Match{{Rule: rule, Key: rule.StoreKey(req.Key)}}, cost)
		json.NewEncoder(w).Encode(map[string]any{"allowed": res.Allowed, "limit": res.Decision.Limit, "remaining": res.Decision.Remaining,
			"retry_after_ms": res.Decision.RetryAfter.Milliseconds(), "reset_after_ms": res.Decision.ResetAfter.Milliseconds()})
	})
	gen.api = mux
	if cfg.Proxy != nil {
		u, err := url.Parse(cfg.Proxy.Upstream)
		if err != nil {
			return nil, err
		}
		rp := httputil.NewSingleHostReverseProxy(u)
		gen.proxy = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ms := eng.Match(r, ips.ClientIP(r), nil)
			res := eng.Admit(r.Context(), ms, 1)
			if !res.Allowed {
				engine.WriteDenied(w, &res, http.StatusTooManyRequests)
				return
			}
			res.SetHeaders(w.Header())
			rp.ServeHTTP(w, r)
		})
	}
	return gen, nil
}
