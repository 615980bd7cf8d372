package redisstore

import (
	"context"
	"testing"
	"time"
)

// openStore is New for the package's internal tests, with a timeout
// generous enough for a loaded CI machine under -race (unless o sets
// one), closed when the test ends; the external tests have open.
func openStore(t testing.TB, o Options) *Store {
	t.Helper()
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	s, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}
