package daemon

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// The settle reads again the counters ten moved keys left, at every
// refresh: readings of different keys are independent, so they go to Redis
// together, each node's in one pipeline, in the round trips one reading
// needs: one for keys that went to their shards (their own key's reading:
// the log's units, the question, the counter's state, in that order on
// its node), two for keys that came back (their shards' reading, on three
// slots: its questions are checked, then taken, as TakeAll does). So at
// most the masters (3) times that, where each reading went alone, call
// after call: 17 and 81 round trips here before.
func TestSettleReadsPipelined(t *testing.T) {
	t.Parallel() // a Cluster and daemons of its own
	f := newSettleFixture(t)
	f.toShards()
	f.settle("to the shards", 1)
	f.back()
	f.settle("back to their own keys", 2)
}

// The seeds of ten keys moved at one refresh read the counters each key
// leaves together, as the settles do (and the counters they go to
// together, for the keys that had used any): with the refresh's exchange
// with the fleet (a script per rule, 3 here), at most 3 + 3 round trips
// to the shards, 3 + 6 back, where they took 13 and 63 (a reading per
// key, one after another).
func TestSeedReadsPipelined(t *testing.T) {
	t.Parallel() // a Cluster and daemons of its own
	f := newSettleFixture(t)
	f.refresh(f.t0, false)
	f.loadScripts()
	moved := func(step string, at time.Time, hot bool, steps int64) {
		t.Helper()
		before := roundTripsFrom(t, f.addrs)
		f.refresh(at, hot)
		n := roundTrips(t, f.addrs) - before
		if got := len(f.a.settles); got != 10 {
			t.Fatalf("%s: %d of 10 moves seeded, the others failed", step, got)
		}
		t.Logf("%s: 10 keys moved in %d round trips", step, n)
		if want := int64(len(f.rules)) + int64(len(f.addrs))*steps; n > want {
			t.Errorf("%s: 10 keys moved in %d round trips, want at most %d (%d rules' exchanges, %d masters × %d)", step, n, want, len(f.rules), len(f.addrs), steps)
		}
	}
	moved("to the shards", f.t0, true, 1)
	moved("back to their own keys", f.pastSets(), false, 2)
}

// BenchmarkSettle settles ten moved keys (a third each sliding_window_log,
// sliding_window_counter of two segments, token_bucket) on a 3-node
// Cluster: to their shards (each reading is of the key's own counter) and
// back (each is of its 3 shards). round-trips/op counts each node's
// answers (roundTrips).
func BenchmarkSettle(b *testing.B) {
	for _, back := range []bool{false, true} {
		name := "to-shards"
		if back {
			name = "back"
		}
		b.Run(name, func(b *testing.B) {
			f := newSettleFixture(b)
			f.toShards()
			if back {
				f.back()
			}
			f.settleOnce("warm") // the scripts loaded on every node
			before := roundTripsFrom(b, f.addrs)
			b.ResetTimer()
			for b.Loop() {
				f.settleOnce("settle")
			}
			b.StopTimer()
			b.ReportMetric(float64(roundTrips(b, f.addrs)-before)/float64(b.N), "round-trips/op")
		})
	}
}

// settleFixture is a hotPair with ten keys of three rules of shards: auto,
// for a's settles: a moves them, and settles the moves.
type settleFixture struct {
	*hotPair
	rules []string
	keys  map[string][]string // by rule
	at    time.Time           // the last refresh's
}

func newSettleFixture(tb testing.TB) *settleFixture {
	return newSettleFixtureAt(tb, "100/m", "100/s")
}

// newSettleFixtureAt is newSettleFixture with the windows' rate (log,
// slide) and the bucket's (of burst 100) given.
func newSettleFixtureAt(tb testing.TB, window, bucket string) *settleFixture {
	f := &settleFixture{hotPair: newHotPair(tb, "  - {name: log, rate: "+window+", algorithm: sliding_window_log, shards: auto}\n"+
		"  - {name: slide, rate: "+window+", segments: 2, algorithm: sliding_window_counter, shards: auto}\n"+
		"  - {name: bucket, rate: "+bucket+", burst: 100, algorithm: token_bucket, shards: auto}\n"),
		rules: []string{"log", "slide", "bucket"}, keys: map[string][]string{}}
	for i := range 10 {
		r := f.a.engine().Rules().Rule(f.rules[i%3])
		f.keys[r.Name] = append(f.keys[r.Name], r.Name+"|"+r.Fingerprint+"|tenant"+strconv.Itoa(i))
	}
	return f
}

// refresh refreshes a's hot sets at at, after traffic of every key when
// hot.
func (f *settleFixture) refresh(at time.Time, hot bool) {
	f.at = at
	f.now.Store(&at)
	if hot {
		for rule, ks := range f.keys {
			for _, k := range ks {
				for range 8000 {
					f.a.hot.Rule(rule).Observe(k, 2, at)
				}
			}
		}
	}
	f.a.refreshHot(at)
}

// loadScripts has every node of the Cluster run the readings' scripts
// once, on other keys: a node answers a script's first call NOSCRIPT, and
// its call is sent again.
func (f *settleFixture) loadScripts() {
	f.t.Helper()
	var rds []redisstore.Reading
	for _, rule := range f.rules {
		r := f.a.engine().Rules().Rule(rule)
		rds = append(rds, redisstore.Reading{Requests: f.s.Shards(sluice.Request{Key: "scripts/" + rule, Algorithm: r.Algorithm, Limit: r.Limit}, 3)})
	}
	f.s.ReadCounters(f.ctx, rds)
	for _, rd := range rds {
		if rd.Err != nil {
			f.t.Fatal(rd.Err)
		}
	}
}

// toShards has a move the keys to their shards.
func (f *settleFixture) toShards() {
	f.refresh(f.t0, false)
	f.refresh(f.t0, true)
}

// back has a move the keys back to their own keys, past their time in
// the fleet's sets.
func (f *settleFixture) back() {
	f.refresh(f.pastSets(), false)
}

// pastSets moves Redis's clock on past the keys' time in the fleet's sets,
// for the sets, and returns the now to refresh at from then on.
func (f *settleFixture) pastSets() time.Time {
	later := f.t0
	for _, rule := range f.rules {
		ttl := (*f.a.hotAuto.Load())[rule]
		f.advance(rule, ttl+time.Minute)
		later = later.Add(max(0, f.t0.Add(ttl+time.Minute).Sub(later)))
	}
	return later
}

// settleOnce settles a's ten moves once, at the last refresh's instant,
// and checks that every reading succeeded (a move whose reading fails is
// dropped).
func (f *settleFixture) settleOnce(step string) {
	f.t.Helper()
	xs := f.a.takeSettles()
	if len(xs) != 10 {
		f.t.Fatalf("%s: %d moves to settle, want 10", step, len(xs))
	}
	for i := range xs {
		xs[i].left = 2 // read on after this round
	}
	f.a.settle(f.ctx, f.a.cur.Load(), f.s, xs, nil, f.at, 3)
	if got := len(f.a.settles); got != 10 {
		f.t.Fatalf("%s: %d of 10 moves read again, the others failed", step, got)
	}
}

// settle settles a's moves twice, the second time counting its round
// trips: at most the masters times steps.
func (f *settleFixture) settle(step string, steps int64) {
	f.t.Helper()
	f.settleOnce(step + ", first") // the scripts loaded on every node
	before := roundTripsFrom(f.t, f.addrs)
	f.settleOnce(step)
	n := roundTrips(f.t, f.addrs) - before
	f.t.Logf("%s: 10 moved keys settled in %d round trips", step, n)
	if want := int64(len(f.addrs)) * steps; n > want {
		f.t.Errorf("%s: 10 moved keys settled in %d round trips, want at most %d (%d masters × %d)", step, n, want, len(f.addrs), steps)
	}
}

// roundTrips is how many times the nodes at addrs sent answers to their
// clients (INFO stats: total_writes_processed), less the commands that a
// client sends alone, one answer each, and no script runs: this
// function's INFO, the clients' background PINGs, the stores' reads of the
// slot map. What is left are the scripts' round trips: a pipeline of
// scripts is answered in one write. A count ends with it and starts with
// roundTripsFrom.
func roundTrips(t testing.TB, addrs []string) int64 {
	t.Helper()
	var n int64
	for _, addr := range addrs {
		s := readTrips(t, addr)
		n += s.writes - s.info - s.alone
	}
	return n
}

// roundTripsFrom is roundTrips at the start of a count. Redis counts a
// call as it runs it, and the write of its answer as it writes, at the end
// of its event loop's round: a client's PING run in the same round as
// the INFO, before it (a Redis that waited for the CPU finds both
// waiting), is in the INFO's calls and not in its writes, and a count
// that started there found a round trip that was not made. So the calls
// sent alone are taken from one INFO and the writes from a second, sent
// once the first was answered: every call the first counted had been
// answered by then. A PING answered between the two is counted as a
// script's: a count can find fewer round trips than were made, not more.
func roundTripsFrom(t testing.TB, addrs []string) int64 {
	t.Helper()
	var n int64
	for _, addr := range addrs {
		first := readTrips(t, addr)
		s := readTrips(t, addr)
		n += s.writes - s.info - first.alone
	}
	return n
}

// trips is what roundTrips reads of a node's INFO: the writes of its
// answers, its calls of INFO, and those of the other commands sent alone.
type trips struct{ writes, info, alone int64 }

func readTrips(t testing.TB, addr string) trips {
	t.Helper()
	info, err := redistest.Do(addr, "INFO", "stats", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	var s trips
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "total_writes_processed:"); ok {
			s.writes = parseStat(t, line, v)
		}
		for _, cmd := range []string{"info", "ping", "cluster|slots", "cluster|info"} {
			if v, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
				v, _, _ = strings.Cut(v, ",")
				if cmd == "info" {
					s.info = parseStat(t, line, v)
				} else {
					s.alone += parseStat(t, line, v)
				}
			}
		}
	}
	return s
}

func parseStat(t testing.TB, line, v string) int64 {
	t.Helper()
	x, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("INFO: %q: %v", line, err)
	}
	return x
}
