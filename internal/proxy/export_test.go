package proxy

import "testing"

// SetTestHookWatching has f run each time the fast path starts watching
// a client (watch.go), until t ends.
func SetTestHookWatching(t testing.TB, f func()) {
	testHookWatching.Store(&f)
	t.Cleanup(func() { testHookWatching.Store(nil) })
}
