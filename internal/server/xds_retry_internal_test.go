package server

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"testing"
	"testing/synctest"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/internal/descriptors"
)

// brokenADS is an xDS server that cannot be reached: each subscription
// fails at once, its time (the bubble's clock) recorded; the n-th
// cancels the run.
type brokenADS struct {
	discovery.AggregatedDiscoveryServiceClient
	at     []time.Time
	n      int
	cancel context.CancelFunc
}

func (b *brokenADS) StreamAggregatedResources(context.Context, ...grpc.CallOption) (grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse], error) {
	b.at = append(b.at, time.Now())
	if len(b.at) == b.n {
		b.cancel()
	}
	return nil, errors.New("connection refused")
}

// retryWaits runs a subscription to a server that cannot be reached
// until it has tried n times, and returns the waits between the tries.
func retryWaits(t *testing.T, retry time.Duration, n int) []time.Duration {
	t.Helper()
	var waits []time.Duration
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		ads := &brokenADS{n: n, cancel: cancel}
		c := &xdsClient{o: XDSOptions{Retry: retry, Apply: func(string, []descriptors.Doc) error { return nil }, Logger: slog.New(slog.DiscardHandler)}, ads: ads, node: xdsNode(XDSOptions{NodeID: "n"})}
		c.run(ctx)
		for i := 1; i < len(ads.at); i++ {
			waits = append(waits, ads.at[i].Sub(ads.at[i-1]))
		}
	})
	if len(waits) != n-1 {
		t.Fatalf("%d tries, want %d", len(waits)+1, n)
	}
	return waits
}

// The waits between subscriptions to a server that is away are drawn
// from [retry/2, retry]: the bounds come from the random source, which
// the run asks for each wait.
func TestXDSRetryJitterBounds(t *testing.T) {
	serialHooks(t) // it sets xdsRand
	const retry = 3 * time.Second
	draws := []func(n int64) int64{
		func(int64) int64 { return 0 },
		func(n int64) int64 { return n - 1 },
		func(n int64) int64 { return n / 2 },
	}
	var asked []int64
	i := 0
	orig := xdsRand
	xdsRand = func(n int64) int64 {
		asked = append(asked, n)
		d := draws[i%len(draws)](n)
		i++
		return d
	}
	t.Cleanup(func() { xdsRand = orig })
	waits := retryWaits(t, retry, 4)
	want := []time.Duration{retry / 2, retry, retry/2 + retry/4}
	for i, w := range waits {
		if w != want[i] {
			t.Errorf("wait %d = %v, want %v", i+1, w, want[i])
		}
	}
	for _, n := range asked {
		if n != int64(retry/2)+1 {
			t.Errorf("random source asked for [0, %d), want [0, %d): waits in [retry/2, retry]", n, int64(retry/2)+1)
		}
	}
	if len(asked) != 3 {
		t.Errorf("random source asked %d times over 3 waits, want once a wait", len(asked))
	}
}

// With the real random source, a fleet's waits spread over the whole
// range, and none exceeds retry.
func TestXDSRetryJitterSpreads(t *testing.T) {
	const retry = 3 * time.Second
	waits := retryWaits(t, retry, 201)
	lo, hi := time.Duration(math.MaxInt64), time.Duration(0)
	seen := map[time.Duration]bool{}
	for _, w := range waits {
		if w < retry/2 || w > retry {
			t.Errorf("wait %v: outside [%v, %v]", w, retry/2, retry)
		}
		lo, hi = min(lo, w), max(hi, w)
		seen[w] = true
	}
	// 200 uniform draws: each bound is missed by chance with
	// probability 0.8^200, below 1e-19.
	if lo > retry*6/10 || hi < retry*9/10 || len(seen) < 150 {
		t.Errorf("200 waits from %v to %v, %d distinct: want them spread over [%v, %v]", lo, hi, len(seen), retry/2, retry)
	}
}

// gRPC's own reconnection waits (while the connection cannot be made)
// are drawn from the same range, the first included. gRPC waits its base
// delay itself, unjittered, after the first attempt that fails, and the
// base alone: so the base is drawn for each connection (from the random
// source), and instances whose attempts failed at one instant (a fleet
// started at once while its server is away) do not all try again at the
// next one.
func TestXDSConnectBackoffJittered(t *testing.T) {
	serialHooks(t) // it sets xdsRand
	const retry = 3 * time.Second
	orig := xdsRand
	t.Cleanup(func() { xdsRand = orig })
	var (
		asked  int
		bases  []time.Duration
		lo, hi = time.Duration(math.MaxInt64), time.Duration(0)
	)
	for _, draw := range []func(n int64) int64{
		func(int64) int64 { return 0 },
		func(n int64) int64 { return n - 1 },
	} {
		xdsRand = func(n int64) int64 { asked++; return draw(n) }
		b := xdsConnectParams(retry).Backoff
		// gRPC's waits: BaseDelay first, then BaseDelay·(1±Jitter).
		wlo := min(b.BaseDelay, time.Duration(float64(b.BaseDelay)*(1-b.Jitter)))
		whi := max(b.BaseDelay, time.Duration(float64(b.BaseDelay)*(1+b.Jitter)))
		if b.Multiplier != 1 || b.MaxDelay != b.BaseDelay || wlo < retry/2-time.Microsecond || whi > retry+time.Microsecond {
			t.Errorf("gRPC backoff %+v: waits [%v, %v], want a steady range within [%v, %v]", b, wlo, whi, retry/2, retry)
		}
		lo, hi = min(lo, wlo), max(hi, whi)
		bases = append(bases, b.BaseDelay)
	}
	if asked != 2 {
		t.Errorf("random source asked %d times for 2 connections, want once each", asked)
	}
	if bases[1]-bases[0] < retry/5 {
		t.Errorf("first waits %v and %v at the two ends of the draw: want them spread, at least %v apart", bases[0], bases[1], retry/5)
	}
	if lo > retry/2+time.Microsecond || hi < retry-time.Microsecond {
		t.Errorf("waits from %v to %v over the draws, want all of [%v, %v]", lo, hi, retry/2, retry)
	}
}
