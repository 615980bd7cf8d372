package redisstore

import "testing"

// SetTakeAllHooks sets the functions a cross-slot TakeAll runs after its
// check and after its take (testHookAfterCheck, testHookAfterTake), for
// the external tests; nil, nil clears them. t must not be parallel
// (serialHooks).
func SetTakeAllHooks(t testing.TB, afterCheck, afterTake func()) {
	serialHooks(t)
	testHookAfterCheck, testHookAfterTake = afterCheck, afterTake
}

// serialHooks makes t fail at once if it runs in parallel with other
// tests (t.Setenv panics in a test that called t.Parallel, and
// t.Parallel after it): the hooks it is about to set are read by every
// test of the package.
func serialHooks(t testing.TB) {
	t.Setenv("SLUICE_TEST_PACKAGE_HOOKS", t.Name())
}

// Slot is the Cluster hash slot of a Redis key.
var Slot = slot
