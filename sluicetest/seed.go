package sluicetest

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// DefaultSeed is the seed Seed returns when SLUICE_SEED is not set.
const DefaultSeed = 20260101

// Seed returns the seed of a randomized test (a long random trace run
// through two stores that must agree). By default it is DefaultSeed, so
// that `go test` decides the same way on every run: a test that explores
// new inputs on each run can fail on any day for reasons no one changed.
// SLUICE_SEED=N replays seed N; SLUICE_SEED=random draws one from the
// clock, for an exploratory run (`make fuzz` does one). The seed is logged,
// so a failure can be replayed.
func Seed(t testing.TB) uint64 {
	t.Helper()
	seed := uint64(DefaultSeed)
	switch v := os.Getenv("SLUICE_SEED"); v {
	case "":
	case "random":
		seed = uint64(time.Now().UnixNano())
	default:
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SLUICE_SEED=%q: want a number or random", v)
		}
		seed = n
	}
	t.Logf("random seed %d (replay with SLUICE_SEED=%d)", seed, seed)
	return seed
}

func seed(t *testing.T) uint64 { return Seed(t) }
