// Package sluicetest is the conformance suite every sluice.Store must pass:
// step tables over explicit instants for every algorithm (the classic
// examples), randomized traces checked against invariants, and a
// differential check against Reference, the algorithms run on a plain map,
// and a check against models written from the documentation alone (a bucket
// of tokens, a queue of units, counts, a list of times).
//
// A store's test calls one function:
//
//	func TestConformance(t *testing.T) {
//		sluicetest.Run(t, func(t *testing.T) sluice.Store { return memstore.New(memstore.Options{}) })
//	}
//
// Every subtest uses keys of its own, so open may return one shared store.
package sluicetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// T0 is the base instant of the step tables: a Unix second that is a
// multiple of a day, so every window of a minute, hour or day starts there.
var T0 = time.Unix(1_700_006_400, 0).UTC()

// Run runs the whole suite against the stores open returns; for a store
// that implements sluice.KeyTaker, the decision tests run again with every
// other request through TakeKey, and for one that implements
// sluice.WithinTaker, through TakeWithin; for one that implements
// sluice.Refunder, its refunds are checked (see RunRefunder).
func Run(t *testing.T, open func(t *testing.T) sluice.Store) {
	t.Run("Tables", func(t *testing.T) {
		for _, tb := range Tables() {
			t.Run(tb.Name, func(t *testing.T) { RunTable(t, open(t), tb) })
		}
	})
	t.Run("Differential", func(t *testing.T) { testDifferential(t, open(t)) })
	t.Run("MatchesModel", func(t *testing.T) { testModel(t, open(t)) })
	t.Run("TakeAllMatchesModel", func(t *testing.T) { testModelTakeAll(t, open(t)) })
	t.Run("SlidingLogNeverOverLimit", func(t *testing.T) { testLogInvariant(t, open(t)) })
	t.Run("FixedWindowNeverOverLimit", func(t *testing.T) { testFixedInvariant(t, open(t)) })
	t.Run("GCRAEqualsTokenBucket", func(t *testing.T) { testGCRAEqualsTokenBucket(t, open(t)) })
	t.Run("RemainingMeansRemaining", func(t *testing.T) { testRemaining(t, open(t)) })
	t.Run("TakeAllDeniedConsumesNothing", func(t *testing.T) { testTakeAll(t, open(t)) })
	t.Run("Errors", func(t *testing.T) { testErrors(t, open(t)) })
	t.Run("ReportCarriesDebt", func(t *testing.T) { testReport(t, open(t)) })
	t.Run("TakeAllReport", func(t *testing.T) { testTakeAllReport(t, open(t)) })
	t.Run("NamespacesApart", func(t *testing.T) { testNamespaces(t, open(t)) })
	t.Run("Reset", func(t *testing.T) { testReset(t, open(t)) })
	t.Run("KeyTaker", func(t *testing.T) { testKeyTaker(t, open) })
	t.Run("WithinTaker", func(t *testing.T) { testWithinTaker(t, open) })
	t.Run("Refunder", func(t *testing.T) { testRefunder(t, open) })
}

// uniq makes keys of one subtest distinct from every other's, so a shared
// store (or a Redis that outlives the test) starts clean.
func uniq(t *testing.T, key string) string {
	return fmt.Sprintf("%s/%d/%s", t.Name(), time.Now().UnixNano(), key)
}
