package hotkeys

import (
	"math"
	"runtime"
	"strconv"
	"sync"
	"testing"
)

// allocated returns the bytes f allocates (runtime.MemStats.TotalAlloc,
// so garbage counts too) and the bytes still held after it (HeapAlloc,
// each after a GC).
func allocated(f func()) (total, held int64) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.GC()
	runtime.ReadMemStats(&after)
	return int64(after.TotalAlloc - before.TotalAlloc), int64(after.HeapAlloc) - int64(before.HeapAlloc)
}

// ruleNames returns n rule names, prefix0…
func ruleNames(prefix string, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = prefix + strconv.Itoa(i)
	}
	return names
}

// maxIdleRuleBytes bounds what a rule no decision has reached may cost a
// Set, counting the growth of the Set's map: its Rule (48 bytes), its
// Summary (64) and its cell in the map (~40, twice that while the map
// grows). Nothing sized by Capacity or Stripes: one stripe's entries alone
// are Capacity × 56 bytes (3,584 by default).
const maxIdleRuleBytes = 512

// TestIdleRulesCostNoSummary: a daemon creates a summary for every rule
// (and, on a reload, for every new rule name) whether or not traffic ever
// reaches it; with 25,000 rules, each allocating Stripes × Capacity
// entries, a heap and a table at once (~21.5 KB on 2 cores), that was
// ~540 MB at startup and again at a reload renaming them. A summary
// allocates nothing sized by Capacity or Stripes until its first key.
func TestIdleRulesCostNoSummary(t *testing.T) {
	for _, c := range []struct {
		o Options
		n int
	}{
		{Options{}, 25_000}, // as the daemon makes them
		// 2 stripes per core on 32 cores (a thousand rules only: before,
		// that was 356 KB a rule).
		{Options{Stripes: 64}, 1_000},
	} {
		o, n := c.o, int64(c.n)
		t.Run("stripes="+strconv.Itoa(o.withDefaults().Stripes), func(t *testing.T) {
			names, renamed := ruleNames("rule-", c.n), ruleNames("renamed-", c.n)
			var s *Set
			total, held := allocated(func() {
				s = NewSet(o, 0, 0)
				for _, name := range names {
					s.Rule(name)
				}
			})
			t.Logf("startup, %d rules: %d bytes allocated (%d/rule), %d held (%d/rule)", n, total, total/n, held, held/n)
			if total > n*maxIdleRuleBytes {
				t.Errorf("startup: %d rules allocated %d bytes, %d per rule; want at most %d per rule", n, total, total/n, maxIdleRuleBytes)
			}
			// A reload renaming every rule: the new names' summaries are
			// created, the old ones dropped.
			total, held = allocated(func() {
				for _, name := range renamed {
					s.Rule(name)
				}
				s.Keep(renamed)
			})
			t.Logf("reload, %d new rule names: %d bytes allocated (%d/rule), %d held (%d/rule)", n, total, total/n, held, held/n)
			// Keep's map of the names kept is garbage too: allow it its
			// cells (~40 bytes a name, twice while it grows).
			if total > n*(maxIdleRuleBytes+128) {
				t.Errorf("reload: %d new rule names allocated %d bytes, %d per rule; want at most %d per rule", n, total, total/n, maxIdleRuleBytes+128)
			}
			runtime.KeepAlive(s)
		})
	}
}

// A stripe's arrays grow with its keys, by doubling from firstSlots, and
// stop at Capacity with the table they had when made at once (4 ×
// Capacity cells): a summary of a few keys holds a few entries.
func TestStripesGrowWithKeys(t *testing.T) {
	s := New(Options{Stripes: 4, Sample: 1})
	if s.loaded() != nil {
		t.Fatal("New: stripes made before any observation")
	}
	if top, rate := s.Top(10, t0); top == nil || len(top) != 0 || rate != 0 {
		t.Fatalf("Top before any observation = %#v, %v; want an empty (non-nil) list, 0", top, rate)
	}
	for i := range 100 {
		s.Observe("k"+strconv.Itoa(i%3), 1, t0)
	}
	for i := range s.loaded() {
		st := &s.loaded()[i]
		if len(st.entries) > 3 || cap(st.entries) > firstSlots || cap(st.heap) > firstSlots || len(st.table) > 4*firstSlots {
			t.Fatalf("stripe %d after 3 keys: %d entries of %d, heap %d, table %d; want at most %d, %d, %d",
				i, len(st.entries), cap(st.entries), cap(st.heap), len(st.table), firstSlots, firstSlots, 4*firstSlots)
		}
	}
	top, _ := s.Top(-1, t0)
	if len(top) != 3 {
		t.Fatalf("Top(-1) after 3 keys = %+v", top)
	}
	for i := range 100_000 {
		s.Observe("k"+strconv.Itoa(i), 1, t0)
	}
	for i := range s.loaded() {
		st := &s.loaded()[i]
		if len(st.entries) != DefaultCapacity || cap(st.entries) != DefaultCapacity || cap(st.heap) != DefaultCapacity || len(st.table) != 4*DefaultCapacity {
			t.Fatalf("stripe %d after 100,000 keys: %d entries of %d, heap %d, table %d; want %d, %d, %d, %d",
				i, len(st.entries), cap(st.entries), cap(st.heap), len(st.table), DefaultCapacity, DefaultCapacity, DefaultCapacity, 4*DefaultCapacity)
		}
	}
}

// The first observations, from many goroutines at once, all land in the
// one set of stripes the summary keeps (run under -race).
func TestFirstObservationsConcurrent(t *testing.T) {
	const goroutines, each = 8, 1000
	for range 500 {
		s := New(Options{Stripes: 4, Sample: 1})
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range goroutines {
			wg.Go(func() {
				<-start
				for range each {
					s.Observe("k", 1, t0)
				}
			})
		}
		wg.Go(func() {
			<-start
			s.Top(1, t0)
		})
		close(start)
		wg.Wait()
		top, rate := s.Top(1, t0)
		// Counts of 1 at t0 add exactly; Rate × τ is within rounding.
		near := func(x float64) bool { return math.Abs(x*s.tau-goroutines*each) < 1e-6 }
		if len(top) != 1 || !near(top[0].Rate) || !near(rate) {
			t.Fatalf("Top(1) = %+v, total %v per τ; want k counted %d times", top, rate*s.tau, goroutines*each)
		}
	}
}

// Once its stripes are full, Observe allocates nothing, for a key it holds
// or one that takes an entry's place (of the length of the key it
// replaces).
func TestObserveWarmNoAllocs(t *testing.T) {
	s := New(Options{Stripes: 4, Sample: 1})
	for i := range 10_000 {
		s.Observe("key-"+strconv.Itoa(10_000+i), 1, t0)
	}
	keys := ruleNames("key-", 20_000)[10_000:]
	i := 0
	if n := testing.AllocsPerRun(10_000, func() {
		s.Observe(keys[i%len(keys)], 1, t0)
		i++
	}); n != 0 {
		t.Fatalf("Observe on full stripes: %v allocations, want 0", n)
	}
}

// A rule with no hot key costs nothing at each refresh: Update allocates
// nothing, still answers an empty (not nil) list, as does Local, and a key
// that turns hot later is found.
func TestUpdateNothingHotAllocatesNothing(t *testing.T) {
	h := Hot{On: 100, Off: 50}
	cold := []Key{{Key: "a", Rate: 10}, {Key: "b", Rate: 99, Error: 5}}
	if n := testing.AllocsPerRun(100, func() { h.Update(cold) }); n != 0 {
		t.Errorf("Update with nothing hot: %v allocations, want 0", n)
	}
	if got := h.Update(nil); got == nil || len(got) != 0 {
		t.Errorf("Update(nil) = %#v, want an empty list", got)
	}
	if got := h.Local(); got == nil || len(got) != 0 {
		t.Errorf("Local = %#v, want an empty list", got)
	}
	if got := h.Update([]Key{{Key: "a", Rate: 150}}); len(got) != 1 || got[0] != "a" || !h.Has("a") {
		t.Errorf("Update with a hot: %v, Has(a) %v", got, h.Has("a"))
	}
	if got := h.Update(cold); len(got) != 0 || h.Has("a") {
		t.Errorf("a cooled down: %v, Has(a) %v", got, h.Has("a"))
	}
}
