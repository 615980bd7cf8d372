package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// serveUpstream is the trivial upstream: a fixed small body.
func serveUpstream(addr string) {
	body := []byte("hello from upstream\n")
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write(body)
	})
	fmt.Fprintln(os.Stderr, http.ListenAndServe(addr, h))
	os.Exit(1)
}

// serveReverseProxy is the baseline for the proxy: net/http's own
// httputil.ReverseProxy with pooled upstream connections, no limiting, so
// the report can tell the cost of proxying from the cost of limiting.
func serveReverseProxy(addr, upstream string) {
	u, err := url.Parse(upstream)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rp := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
		Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second},
		ErrorLog:  log.New(io.Discard, "", 0),
	}
	fmt.Fprintln(os.Stderr, http.ListenAndServe(addr, rp))
	os.Exit(1)
}

// serveFastProxy is a minimal proxy on github.com/valyala/fasthttp (no
// limiting, no header rewriting): what a Go proxy on another HTTP engine
// than net/http costs, for comparison.
func serveFastProxy(addr, upstream string) {
	c := &fasthttp.HostClient{Addr: strings.TrimPrefix(upstream, "http://"), MaxConns: 1024}
	h := func(ctx *fasthttp.RequestCtx) {
		if err := c.Do(&ctx.Request, &ctx.Response); err != nil {
			ctx.Error("bad gateway", fasthttp.StatusBadGateway)
		}
	}
	fmt.Fprintln(os.Stderr, fasthttp.ListenAndServe(addr, h))
	os.Exit(1)
}

type checkRequest struct {
	Rule string `json:"rule"`
	Key  string `json:"key"`
	Cost int64  `json:"cost"`
}

type checkResponse struct {
	Allowed      bool  `json:"allowed"`
	Limit        int64 `json:"limit"`
	Remaining    int64 `json:"remaining"`
	RetryAfterMS int64 `json:"retry_after_ms"`
	ResetAfterMS int64 `json:"reset_after_ms"`
}

// serveBare is the baseline for /v1/check: the same JSON in and out, no
// decision.
func serveBare(addr string) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/check", func(w http.ResponseWriter, r *http.Request) {
		var req checkRequest
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil {
			http.Error(w, `{"error":"bad json"}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(checkResponse{Allowed: true, Limit: 100, Remaining: 99})
	})
	fmt.Fprintln(os.Stderr, http.ListenAndServe(addr, mux))
	os.Exit(1)
}
