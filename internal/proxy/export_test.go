package proxy

import "testing"

// SetTestHookWatching has f run each time the fast path starts watching
// a client (watch.go), until t ends. t must not be parallel: t.Setenv
// makes t.Parallel beside it fail at once, as the hook is the package's.
func SetTestHookWatching(t testing.TB, f func()) {
	t.Setenv("SLUICE_TEST_PACKAGE_HOOKS", t.Name())
	testHookWatching.Store(&f)
	t.Cleanup(func() { testHookWatching.Store(nil) })
}
