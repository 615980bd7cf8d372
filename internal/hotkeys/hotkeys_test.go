package hotkeys

import (
	"fmt"
	"hash/fnv"
	"math"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

// The heavy key among 10,000 light ones is named first, with about its
// rate, in a stream where it is 5% of the traffic.
func TestHeavyAmongLight(t *testing.T) {
	for _, sample := range []int{1, 4} {
		t.Run(fmt.Sprintf("sample=%d", sample), func(t *testing.T) {
			s := New(Options{Capacity: 64, Stripes: 4, HalfLife: 10 * time.Second, Sample: sample})
			// 20 s at 2,000 decisions per second: 100 per second for the
			// heavy key, the rest round-robin over 10,000 light keys.
			const perSec, secs = 2000, 20
			light := 0
			for i := range perSec * secs {
				now := t0.Add(time.Duration(i) * time.Second / perSec)
				if i%20 == 0 {
					s.Observe("heavy", 1, now)
					continue
				}
				s.Observe("light-"+strconv.Itoa(light), 1, now)
				light = (light + 1) % 10_000
			}
			now := t0.Add(secs * time.Second)
			top, total := s.Top(5, now)
			if len(top) == 0 || top[0].Key != "heavy" {
				t.Fatalf("Top(5) = %+v, want heavy first", top)
			}
			// After 2 half-lives of a steady rate the decayed count is
			// 1-2^-2 = 75% of the steady state.
			want := 100 * (1 - math.Pow(2, -secs/10.0))
			if got := top[0].Rate; got < want*0.8 || got > want*1.2+top[0].Error {
				t.Errorf("heavy rate = %.1f/s (error %.1f), want about %.1f", got, top[0].Error, want)
			}
			wantTotal := perSec * (1 - math.Pow(2, -secs/10.0))
			if math.Abs(total-wantTotal) > wantTotal*0.1 {
				t.Errorf("total rate = %.1f/s, want about %.1f", total, wantTotal)
			}
			if len(top) > 1 && top[1].Rate > top[0].Rate/2 {
				t.Errorf("second key %+v is close to the heavy one %+v", top[1], top[0])
			}
		})
	}
}

// Rates fade: a key that stops is no longer the heaviest a few half-lives
// later, and a key that starts takes its place.
func TestDecay(t *testing.T) {
	s := New(Options{Capacity: 8, Stripes: 2, HalfLife: time.Second, Sample: 1})
	for i := range 1000 {
		s.Observe("old", 1, t0.Add(time.Duration(i)*time.Millisecond))
	}
	for i := range 1000 {
		s.Observe("new", 1, t0.Add(time.Second+time.Duration(i)*10*time.Millisecond))
	}
	now := t0.Add(11 * time.Second)
	top, _ := s.Top(2, now)
	if len(top) != 2 || top[0].Key != "new" || top[1].Key != "old" {
		t.Fatalf("Top(2) = %+v, want new then old", top)
	}
	// old: about 1000 × 2^-10.5 / τ ≈ 0.5/s; new ran at 100/s and stopped
	// at t0+11s, at steady state ≈ 100/s.
	if top[1].Rate > 2 {
		t.Errorf("old rate = %.2f/s, want < 2 after 10 half-lives", top[1].Rate)
	}
	if top[0].Rate < 90 || top[0].Rate > 101 {
		t.Errorf("new rate = %.2f/s, want about 100", top[0].Rate)
	}
}

// Counts survive a rescale (an hour at HalfLife 1s crosses it many times).
func TestRescale(t *testing.T) {
	s := New(Options{Capacity: 4, Stripes: 1, HalfLife: time.Second, Sample: 1})
	for i := range 3600 * 10 {
		s.Observe("k", 1, t0.Add(time.Duration(i)*100*time.Millisecond))
	}
	top, total := s.Top(1, t0.Add(time.Hour))
	if len(top) != 1 || math.Abs(top[0].Rate-10) > 0.5 || math.Abs(total-10) > 0.5 {
		t.Fatalf("Top(1) = %+v, total %.2f; want k at 10/s", top, total)
	}
}

// Memory is bounded: a million distinct keys leave Stripes×Capacity
// entries.
func TestBounded(t *testing.T) {
	s := New(Options{Capacity: 16, Stripes: 3, Sample: 1})
	for i := range 1_000_000 {
		s.Observe(strconv.Itoa(i), 1, t0)
	}
	n := 0
	for i := range s.loaded() {
		st := &s.loaded()[i]
		n += len(st.entries)
		used := 0
		for _, v := range st.table {
			if v != 0 {
				used++
			}
		}
		if used != len(st.entries) || len(st.heap) != len(st.entries) {
			t.Fatalf("stripe %d: table %d entries, heap %d, slots %d", i, used, len(st.heap), len(st.entries))
		}
		for j, e := range st.entries {
			if st.find(e.hash) != int32(j) || st.heap[e.pos] != int32(j) {
				t.Fatalf("stripe %d slot %d: find %d, heap[pos] %d", i, j, st.find(e.hash), st.heap[e.pos])
			}
		}
	}
	if n != 48 {
		t.Fatalf("%d entries, want 48", n)
	}
	top, _ := s.Top(-1, t0)
	if len(top) > 48 {
		t.Fatalf("Top(-1) has %d keys", len(top))
	}
}

// Long keys are kept truncated, marked with "…" and the FNV-1a digest of
// the whole key.
func TestLongKey(t *testing.T) {
	s := New(Options{MaxKeyBytes: 4, Sample: 1})
	s.Observe("abcdefgh", 3, t0)
	top, _ := s.Top(1, t0)
	h := fnv.New64a()
	h.Write([]byte("abcdefgh"))
	want := fmt.Sprintf("abcd…%016x", h.Sum64())
	if len(top) != 1 || top[0].Key != want {
		t.Fatalf("Top(1) = %+v, want %s", top, want)
	}
}

func TestHotHysteresis(t *testing.T) {
	h := Hot{On: 100, Off: 50}
	if h.Has("a") {
		t.Fatal("empty set has a")
	}
	h.Update([]Key{{Key: "a", Rate: 120}, {Key: "b", Rate: 70}})
	if !h.Has("a") || h.Has("b") {
		t.Fatal("after 120/70: want a hot, b not")
	}
	h.Update([]Key{{Key: "a", Rate: 60}, {Key: "b", Rate: 99}})
	if !h.Has("a") || h.Has("b") {
		t.Fatal("after 60/99: want a still hot (above Off), b not")
	}
	if got := h.Update([]Key{{Key: "a", Rate: 40}}); len(got) != 0 || h.Has("a") {
		t.Fatalf("after 40: hot = %v, want none", got)
	}
}

// Concurrent observers and readers (run under -race).
func TestConcurrent(t *testing.T) {
	s := New(Options{Capacity: 8, Stripes: 2, Sample: 1})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 5000 {
				k := "k0"
				if i%2 == 1 {
					k = "k" + strconv.Itoa(g+1) + "-" + strconv.Itoa(i%7)
				}
				s.Observe(k, 1, t0.Add(time.Duration(i)*time.Millisecond))
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			s.Top(3, t0)
		}
	})
	wg.Wait()
	top, _ := s.Top(1, t0.Add(5*time.Second))
	if len(top) != 1 || top[0].Key != "k0" {
		t.Fatalf("Top(1) = %+v, want k0 (seen by every goroutine)", top)
	}
}

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "203.0.113." + strconv.Itoa(i%256) + "/" + strconv.Itoa(i)
	}
	return keys
}

// The cost per decision: one hot key (5%) among 10,000.
func BenchmarkObserve(b *testing.B) {
	keys := benchKeys(10_000)
	for _, sample := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("sample=%d", sample), func(b *testing.B) {
			s := New(Options{Sample: sample})
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				k := keys[i%len(keys)]
				if i%20 == 0 {
					k = "hot"
				}
				s.Observe(k, 1, t0.Add(time.Duration(i)*time.Microsecond))
				i++
			}
		})
		b.Run(fmt.Sprintf("sample=%d/parallel", sample), func(b *testing.B) {
			s := New(Options{Sample: sample})
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					k := keys[i%len(keys)]
					if i%20 == 0 {
						k = "hot"
					}
					s.Observe(k, 1, t0.Add(time.Duration(i)*time.Microsecond))
					i++
				}
			})
		})
	}
	// The naive baseline, in the same run: an exact count per key in a
	// map under one mutex (no decay, memory growing with the key count).
	b.Run("baseline=mutex-map/parallel", func(b *testing.B) {
		var mu sync.Mutex
		m := map[string]int64{}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				k := keys[i%len(keys)]
				if i%20 == 0 {
					k = "hot"
				}
				mu.Lock()
				m[k]++
				mu.Unlock()
				i++
			}
		})
	})
	// Every goroutine on one key: the case the random stripes are for.
	b.Run("one-key/parallel", func(b *testing.B) {
		s := New(Options{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				s.Observe("hot", 1, t0)
			}
		})
	})
}

// Memory per rule: the heap a default Summary holds after it has seen a
// million distinct 20-byte keys, reported as B/rule.
func BenchmarkMemory(b *testing.B) {
	keys := benchKeys(1_000_000)
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := New(Options{})
		for i, k := range keys {
			s.Observe(k, 1, t0.Add(time.Duration(i)*time.Microsecond))
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc), "B/rule")
		b.ReportMetric(float64(s.n), "stripes")
		runtime.KeepAlive(s)
	}
}

// Every key Top reports is within Error of its true rate, whether its
// stripes over-count it (Space-Saving's inherited count) or some stripe
// lost it to newer keys (that stripe's share of it is missing from Rate).
func TestErrorBound(t *testing.T) {
	check := func(t *testing.T, s *Summary, exact map[string]float64) {
		t.Helper()
		top, _ := s.Top(-1, t0)
		for _, k := range top {
			got, want, e := k.Rate*s.tau, exact[k.Key], k.Error*s.tau
			if math.Abs(got-want) > e+1e-6 {
				t.Errorf("%s: count %.2f, error %.2f; true count %.0f is outside", k.Key, got, e, want)
			}
		}
	}
	t.Run("evicted from one stripe", func(t *testing.T) {
		// With 100 observations, "a" is in both stripes (but for odds of
		// 2^-99); "b" then replaces it in one of them.
		s := New(Options{Capacity: 1, Stripes: 2, Sample: 1})
		for range 100 {
			s.Observe("a", 1, t0)
		}
		s.Observe("b", 1, t0)
		check(t, s, map[string]float64{"a": 100, "b": 1})
	})
	t.Run("skewed stream", func(t *testing.T) {
		s := New(Options{Capacity: 8, Stripes: 4, Sample: 1})
		exact := map[string]float64{}
		for i := range 20_000 {
			// Key j about 1/j of the time, over 300 keys.
			j := 1 + (i*7919)%300
			j = 1 + j*j/300
			k := "k" + strconv.Itoa(j)
			exact[k]++
			s.Observe(k, 1, t0)
		}
		for i := range 2000 { // then a flood of distinct keys
			k := "flood" + strconv.Itoa(i)
			exact[k]++
			s.Observe(k, 1, t0)
		}
		check(t, s, exact)
	})
}
