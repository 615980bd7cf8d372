package server_test

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestReport: a descriptor with report: true charges its hits even past
// the limit, as Envoy's apply_on_stream_done call carries an LLM
// response's tokens; the overage is debt: the next checks (hits_addend 0)
// are over until it has drained at the rate, and while they are, a second
// descriptor of the same request is not counted (denied traffic consumes
// nothing). On memory, Redis and a Redis Cluster.
func TestReport(t *testing.T) {
	t.Parallel() // a store (a Cluster's start, for the cluster kind) and a service of its own
	const conf = `
domain: llm
descriptors:
  - key: tokens
    report: true
    algorithm: token_bucket
    rate_limit: {unit: minute, requests_per_unit: 600}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 100}
`
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			var at atomic.Int64 // µs after tMid
			now := func() time.Time { return tMid.Add(time.Duration(at.Load()) * time.Microsecond) }
			e := startRLS(t, newStore(t, kind), writeConf(t, conf), envOpts{now: now})
			tokens := func(hits uint64) *descriptorPB { return withHits(desc("tokens", "t1"), hits) }
			user := func() *descriptorPB { return desc("user", "u1") }

			// Before the response: a check that counts no tokens, and
			// one request for the user.
			if got := codesOf(e.call(t, "llm", 0, tokens(0), user())); got != "O:OO" {
				t.Fatalf("first check: %s, want O:OO", got)
			}
			// The response cost 1,500 tokens against 600 a minute.
			r := e.call(t, "llm", 0, tokens(1500))
			if got := codesOf(r); got != "X:X" {
				t.Fatalf("report of 1500 tokens against 600/min: %s, want X:X (charged, and over)", got)
			}
			userLeft := e.remaining(t, "llm", "user", "u1")
			// 1,500 tokens of a bucket of 600: 900 must drain at 10/s
			// before a check (0 tokens) fits again, 90 s.
			for _, after := range []time.Duration{0, time.Second, time.Minute, 90*time.Second - time.Microsecond} {
				at.Store(after.Microseconds())
				if got := codesOf(e.call(t, "llm", 0, tokens(0), user())); got != "X:XO" {
					t.Fatalf("check %v after the report: %s, want X:XO (in debt)", after, got)
				}
			}
			if left := e.remaining(t, "llm", "user", "u1"); left != userLeft {
				t.Fatalf("the user's remaining went from %d to %d while the token budget denied: denied requests must count nothing", userLeft, left)
			}
			at.Store((90 * time.Second).Microseconds())
			if got := codesOf(e.call(t, "llm", 0, tokens(0), user())); got != "O:OO" {
				t.Fatalf("at 90 s, when the debt has drained: %s, want O:OO", got)
			}
			if left := e.remaining(t, "llm", "user", "u1"); left != userLeft-1 {
				t.Fatalf("the user's remaining after an admitted request: %d, want %d", left, userLeft-1)
			}
			// A report that fits is an ordinary charge.
			at.Store((150 * time.Second).Microseconds())
			if got := codesOf(e.call(t, "llm", 0, tokens(5))); got != "O:O" {
				t.Fatalf("a report of 5 tokens with the budget drained: %s, want O:O", got)
			}
		})
	}
}
