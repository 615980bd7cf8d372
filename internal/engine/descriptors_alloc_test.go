package engine_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/memstore"
)

// TestDecideDescriptorsAllocations: an Envoy request admitted by its
// descriptors' warm counters in memory, on the real clock and with the
// descriptors' metrics, as the service decides it, allocates no more
// than counted here. The array of negative descriptors escaped to the heap on
// every request, negative descriptors or none (giveBackDescriptors'
// goroutines captured it), and so did each descriptor's request to the
// store, and each negative descriptor's refund (their address went to
// Options.Shard); memstore's TakeAll made three slices of its own for
// four requests.
func TestDecideDescriptorsAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	s, err := descriptors.Parse("d.yaml", []byte(`
domain: d
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: global
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: quota
    quota_mode: true
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: soft
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1000000000}
`))
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(prometheus.NewRegistry())
	e, err := engine.New(engine.Options{Store: memstore.New(memstore.Options{}), Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		kvs  [][2]string
		neg  bool // the first descriptor gives its hits back
		want float64
	}{
		{"one descriptor", [][2]string{{"user", "alice"}}, false, 0},
		{"four descriptors", [][2]string{{"user", "alice"}, {"global", "x"}, {"quota", "q"}, {"soft", "s"}}, false, 0},
		// giveBackDescriptors' closure, and the flag and WaitGroup it
		// shares with the refunds' goroutines.
		{"a negative descriptor and another", [][2]string{{"global", "n"}, {"user", "bob"}}, true, 3},
	} {
		ds := match(t, s, 1, tc.kvs...)
		for i := range ds {
			ds[i].Metrics = m.Envoy().Descriptor("d", tc.kvs[i][0], false)
		}
		ds[0].Negative = tc.neg
		st := make([]engine.DescriptorStatus, len(ds))
		ctx := context.Background()
		e.DecideDescriptors(ctx, ds, st) // the counters' first take makes them
		var res engine.DescriptorsResult
		allocs := testing.AllocsPerRun(1000, func() {
			res = e.DecideDescriptors(ctx, ds, st)
		})
		if res.OverLimit || res.StoreErr != nil || !st[0].Asked {
			t.Fatalf("%s: %+v, statuses %+v; want admitted by the store", tc.name, res, st)
		}
		if allocs > tc.want {
			t.Errorf("%s: %v allocations per request, want at most %v", tc.name, allocs, tc.want)
		}
	}
}
