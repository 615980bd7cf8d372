package memstore_test

import (
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

func TestConformance(t *testing.T) {
	sluicetest.Run(t, func(t *testing.T) sluice.Store { return memstore.New(memstore.Options{}) })
}

func TestConformanceOneShard(t *testing.T) {
	// Every key in one shard: the incremental sweep visits the keys of
	// every subtest constantly, and forgetting keys at rest must never
	// change a decision.
	s := memstore.New(memstore.Options{Shards: 1})
	sluicetest.Run(t, func(t *testing.T) sluice.Store { return s })
}
