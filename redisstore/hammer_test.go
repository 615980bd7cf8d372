package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// The hammer: several processes (this test binary, re-executed) share one
// real Redis and hammer one key per algorithm concurrently, at one instant
// so that nothing refills. The number admitted must equal the limit exactly.

const (
	hammerEnvAddr = "SLUICE_HAMMER_ADDR"
	hammerEnvKey  = "SLUICE_HAMMER_KEY"
	hammerProcs   = 4
	hammerWorkers = 8
	hammerTries   = 60 // per worker: 4×8×60 = 1920 attempts per algorithm
	hammerLimit   = 500
)

// hammerLimitFor gives each algorithm a limit whose capacity at one instant is
// hammerLimit (the leaky bucket admits Burst+1 at an instant).
func hammerLimitFor(alg sluice.Algorithm) sluice.Limit {
	l := sluice.PerHour(hammerLimit)
	if alg == sluice.LeakyBucket {
		l = l.WithBurst(hammerLimit - 1)
	}
	return l
}

func TestHammerProcesses(t *testing.T) {
	srv := redistest.StartServer(t)
	key := fmt.Sprintf("hammer/%d", time.Now().UnixNano())
	var wg sync.WaitGroup
	outs := make([]string, hammerProcs)
	errs := make([]error, hammerProcs)
	for i := range hammerProcs {
		wg.Go(func() {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHammer$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), hammerEnvAddr+"="+srv.Addr, hammerEnvKey+"="+key)
			b, err := cmd.CombinedOutput()
			outs[i], errs[i] = string(b), err
		})
	}
	wg.Wait()
	admitted := map[string]int{}
	for i := range hammerProcs {
		if errs[i] != nil {
			t.Fatalf("hammer process %d: %v\n%s", i, errs[i], outs[i])
		}
		for _, line := range strings.Split(outs[i], "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[0] == "ADMITTED" {
				n, _ := strconv.Atoi(f[2])
				admitted[f[1]] += n
			}
		}
	}
	for _, alg := range sluice.Algorithms() {
		if got := admitted[alg.String()]; got != hammerLimit {
			t.Errorf("%v: %d processes × %d workers admitted %d in total, want exactly %d", alg, hammerProcs, hammerWorkers, got, hammerLimit)
		}
	}
}

// TestHelperHammer is the child process of TestHammerProcesses; run alone,
// it does nothing.
func TestHelperHammer(t *testing.T) {
	addr, key := os.Getenv(hammerEnvAddr), os.Getenv(hammerEnvKey)
	if addr == "" {
		return
	}
	s, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{addr}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Every algorithm at once, so that the processes overlap for each.
	var mu sync.Mutex
	n := map[sluice.Algorithm]int{}
	var wg sync.WaitGroup
	for _, alg := range sluice.Algorithms() {
		for range hammerWorkers {
			wg.Go(func() {
				for range hammerTries {
					d, err := s.Take(context.Background(), sluice.Request{Key: key + "/" + alg.String(), Algorithm: alg, Limit: hammerLimitFor(alg), Cost: 1, Now: sluicetest.T0})
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						mu.Lock()
						n[alg]++
						mu.Unlock()
					}
				}
			})
		}
	}
	wg.Wait()
	for _, alg := range sluice.Algorithms() {
		fmt.Printf("ADMITTED %s %d\n", alg, n[alg])
	}
}
