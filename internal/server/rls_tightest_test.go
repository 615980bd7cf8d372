package server_test

import (
	"strconv"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/memstore"
)

// The headers carry the tightest descriptor's figures, chosen as the HTTP
// edges choose the tightest rule, whatever the descriptors' order: of the
// descriptors over the limit, the one with the longest wait (a Retry-After
// pointing at the shortest would send the client back while the longest
// still refuses it); else the least remaining, ties going to the one that
// is full again last.
func TestResponseHeadersTightest(t *testing.T) {
	const conf = `domain: web
descriptors:
  - key: sec
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: min
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: hour
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: min2
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: hour2
    rate_limit: {unit: hour, requests_per_unit: 2}
`
	e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, conf), envOpts{headers: true})
	hs := func(r *rlsv3.RateLimitResponse) map[string]string {
		m := map[string]string{}
		for _, h := range r.ResponseHeadersToAdd {
			m[h.Key] = h.Value
		}
		return m
	}
	// tMid is 10:00:30: the minute's window ends in 30s, the hour's in 3570s.
	for i, order := range [][2]string{{"min2", "hour2"}, {"hour2", "min2"}} {
		v := "a" + strconv.Itoa(i) // fresh counters for each order
		r := e.call(t, "web", 0, desc(order[0], v), desc(order[1], v))
		if h := hs(r); h["X-RateLimit-Remaining"] != "1" || h["X-RateLimit-Reset"] != "3570" {
			t.Errorf("order %v (call %d): headers %v, want hour2's (1 left, full again in 3570s: the same remaining as min2's, full again later)", order, i, h)
		}
	}
	e.call(t, "web", 0, desc("sec", "b"), desc("min", "b"), desc("hour", "b"))
	for _, order := range [][3]string{{"sec", "min", "hour"}, {"hour", "min", "sec"}, {"min", "hour", "sec"}} {
		r := e.call(t, "web", 0, desc(order[0], "b"), desc(order[1], "b"), desc(order[2], "b"))
		if codesOf(r) != "X:XXX" {
			t.Fatalf("order %v: %s, want all three over the limit", order, codesOf(r))
		}
		if h := hs(r); h["Retry-After"] != "3570" || h["X-RateLimit-Retry-After"] != "3570" || h["X-RateLimit-Limit"] != "1" || h["X-RateLimit-Reset"] != "3570" {
			t.Errorf("order %v: headers %v, want the hour's: Retry-After 3570, the longest wait", order, h)
		}
	}
}
