// Package hotkeys finds the heaviest keys of a rule: a heavy-hitter
// summary with bounded memory, whatever the number of distinct keys, whose
// counts decay so that it reports current rates rather than totals.
//
// # Algorithm
//
// A Summary is a set of stripes, each a Space-Saving summary (Metwally,
// Agrawal, El Abbadi, 2005) of Capacity entries kept in a min-heap: a key
// already present adds its weight; a new key replaces the entry with the
// smallest count and inherits that count as its error bound. Any key whose
// share of a stripe's traffic exceeds 1/Capacity is guaranteed to be in
// it, and no count in a stripe is ever under-estimated.
//
// Each observation goes to a stripe chosen at random (skipping a busy one),
// never by key, so one hot key observed from every core does not serialise
// on one lock: every stripe then sees a random share of the same stream,
// and Top adds a key's counts over the stripes. A stripe that lost a key
// to a newer one had counted at most its smallest count of it, which the
// sum lacks: Key.Error counts that too, so the true rate is within Error
// of Rate, either way.
//
// Counts decay exponentially with time constant Tau = HalfLife/ln 2: an
// observation at t weighs exp((t-t0)/Tau) (the stripe rescales before that
// overflows), so every entry decays at once without being touched, and a
// key seen at a steady r per second converges to r×Tau: its rate is the
// decayed count over Tau.
//
// With Sample n > 1 only one observation in n (at random) is recorded, with
// weight n: cheaper, and noisier for keys seen fewer than a few n times
// per HalfLife; heavy keys, the ones this is for, are unaffected.
package hotkeys

import (
	"hash/maphash"
	"math"
	"math/rand/v2"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Summary; the zero value of each field is a default.
type Options struct {
	// Capacity is the number of keys each stripe tracks; default 64.
	Capacity int
	// Stripes is the number of independent summaries; default
	// 2×GOMAXPROCS, at least 2.
	Stripes int
	// HalfLife is how fast counts fade; default 10s.
	HalfLife time.Duration
	// Sample records one observation in Sample (weighted by Sample);
	// default 4, which keeps the cost per decision well under 100ns; 1
	// records every one.
	Sample int
	// MaxKeyBytes caps the bytes of a key kept (longer keys are tracked
	// by their hash and reported truncated with "…"); default 512.
	MaxKeyBytes int
}

// Defaults.
const (
	DefaultCapacity = 64
	DefaultHalfLife = 10 * time.Second
	// DefaultMaxKeyBytes keeps whole every key the daemon builds: a
	// rule's (at most 331 bytes: rules.MaxNameLen + 11 + rules.MaxKeyLen)
	// and a descriptor's values (at most descriptors.MaxKeyLen, 512).
	// shards: auto rebuilds a key from what the summary keeps (Key.Raw)
	// to carry its count across a move, which a digested text cannot be.
	DefaultMaxKeyBytes = 512
	DefaultSample      = 4
)

func (o Options) withDefaults() Options {
	if o.Capacity <= 0 {
		o.Capacity = DefaultCapacity
	}
	if o.Stripes <= 0 {
		o.Stripes = max(2, 2*runtime.GOMAXPROCS(0))
	}
	if o.HalfLife <= 0 {
		o.HalfLife = DefaultHalfLife
	}
	if o.Sample <= 0 {
		o.Sample = DefaultSample
	}
	if o.MaxKeyBytes <= 0 {
		o.MaxKeyBytes = DefaultMaxKeyBytes
	}
	return o
}

// Summary is the heavy-hitter summary of one rule. It is safe for
// concurrent use. Its memory is bounded (Stripes × Capacity entries, each
// holding at most MaxKeyBytes of key) and taken as keys come: a Summary
// that has observed nothing holds no stripe, and a stripe's arrays grow
// with its keys, up to Capacity (a daemon keeps one per rule, whether
// traffic reaches the rule or not).
type Summary struct {
	stripes  atomic.Pointer[[]stripe] // nil until the first observation
	n        int                      // stripes
	capacity int
	tau      float64 // seconds
	sample   uint64
	weight   float64
	maxKey   int
	seed     maphash.Seed
}

// stripe is one Space-Saving summary, padded against false sharing. Its
// entries sit in fixed slots; heap orders the slots by count (a min-heap)
// and table finds a slot by key hash (open addressing, linear probing), so
// moving an entry in the heap touches no hash table. The three arrays grow
// together (grow) until entries holds capacity slots.
type stripe struct {
	mu       sync.Mutex
	t0       int64   // ns: the instant of weight 1
	last     int64   // ns: the latest observation: the stripe's time never runs back
	total    float64 // the decayed weight of every observation
	entries  []entry
	heap     []int32 // slots, a min-heap on count
	table    []int32 // slot+1 by hash; 0 is empty
	mask     uint64
	capacity int // of entries, at most: Options.Capacity
	_        [64]byte
}

type entry struct {
	hash  uint64
	key   []byte  // appendKept: the key's bytes, or the text of a longer key
	count float64 // decayed, in units of weight at t0
	err   float64 // the count inherited on replacement: an upper bound of the over-estimate
	pos   int32   // index in heap
	bin   bool    // key is not UTF-8: its text is appendKey's (Top)
}

// New returns an empty Summary. It allocates its stripes at its first
// observation, and each stripe its entries as keys come.
func New(o Options) *Summary {
	o = o.withDefaults()
	return &Summary{
		n:        o.Stripes,
		capacity: o.Capacity,
		tau:      o.HalfLife.Seconds() / math.Ln2,
		sample:   uint64(o.Sample),
		weight:   float64(o.Sample),
		maxKey:   o.MaxKeyBytes,
		seed:     maphash.MakeSeed(),
	}
}

// loaded returns the stripes, nil before the first observation.
func (s *Summary) loaded() []stripe {
	if p := s.stripes.Load(); p != nil {
		return *p
	}
	return nil
}

// alloc returns the stripes, making them if no observation has yet.
func (s *Summary) alloc() []stripe {
	st := make([]stripe, s.n)
	for i := range st {
		st[i].capacity = s.capacity
	}
	if s.stripes.CompareAndSwap(nil, &st) {
		return st
	}
	return *s.stripes.Load()
}

// firstSlots is how many entries a stripe makes room for at its first key;
// it doubles them as keys come, up to capacity.
const firstSlots = 4

// grow makes room for more entries (st.mu held, entries full, fewer than
// capacity): twice as many, up to capacity, with a heap and a table to
// match (the table 4 times the entries, a power of 2, filled again).
func (st *stripe) grow() {
	n := min(st.capacity, max(firstSlots, 2*cap(st.entries)))
	entries := make([]entry, len(st.entries), n)
	copy(entries, st.entries)
	heap := make([]int32, len(st.heap), n)
	copy(heap, st.heap)
	size := 4
	for size < 4*n {
		size *= 2
	}
	st.entries, st.heap = entries, heap
	st.table = make([]int32, size)
	st.mask = uint64(size - 1)
	for j := range st.entries {
		st.insert(st.entries[j].hash, int32(j))
	}
}

// rescaleAt is the exponent (in units of Tau) past which a stripe rescales
// its counts: weights stay below e^40 ≈ 2.4e17.
const rescaleAt = 40

// Observe records one decision of cost (≤ 0 counts as 1) for key at now.
func (s *Summary) Observe(key string, cost int64, now time.Time) {
	r := rand.Uint64()
	if s.sample > 1 && r%s.sample != 0 {
		return
	}
	if cost <= 0 {
		cost = 1
	}
	h := maphash.String(s.seed, key)
	stripes := s.loaded()
	if stripes == nil {
		stripes = s.alloc()
	}
	n := uint64(len(stripes))
	i := (r / s.sample) % n
	st := &stripes[i]
	// A busy stripe is skipped: any stripe will do, and waiting is what
	// costs under contention.
	for tries := uint64(1); !st.mu.TryLock(); tries++ {
		if tries == n {
			st.mu.Lock()
			break
		}
		i++
		if i == n {
			i = 0
		}
		st = &stripes[i]
	}
	st.add(h, key, s.weight*float64(cost), now.UnixNano(), s.tau, s.maxKey)
	st.mu.Unlock()
}

// add records weight w for key (hash h) at now (ns); st.mu is held.
func (st *stripe) add(h uint64, key string, w float64, now int64, tau float64, maxKey int) {
	if st.t0 == 0 {
		st.t0 = now
	}
	// An observation earlier than the latest (a wall clock stepped back,
	// or a concurrent caller's slightly older now) counts as at the latest:
	// weighed as from the past, it would count for nothing after a step of
	// minutes.
	now = max(now, st.last)
	st.last = now
	x := float64(now-st.t0) / 1e9 / tau
	if x > rescaleAt {
		st.rescale(now, tau)
		x = 0
	}
	w *= math.Exp(x)
	st.total += w
	if j := st.find(h); j >= 0 {
		e := &st.entries[j]
		e.count += w
		st.down(int(e.pos))
		return
	}
	if len(st.entries) < st.capacity {
		if len(st.entries) == cap(st.entries) {
			st.grow()
		}
		j := int32(len(st.entries))
		kept, bin := appendKept(nil, key, maxKey)
		st.entries = append(st.entries, entry{hash: h, key: kept, count: w, pos: j, bin: bin})
		st.heap = append(st.heap, j)
		st.insert(h, j)
		st.up(int(j))
		return
	}
	// Replace the smallest entry: the new key inherits its count.
	j := st.heap[0]
	e := &st.entries[j]
	st.remove(e.hash)
	e.hash = h
	e.key, e.bin = appendKept(e.key[:0], key, maxKey)
	e.err = e.count
	e.count += w
	st.insert(h, j)
	st.down(0)
}

// find returns the slot of hash h, or -1.
func (st *stripe) find(h uint64) int32 {
	if st.table == nil { // no key yet
		return -1
	}
	for i := h & st.mask; ; i = (i + 1) & st.mask {
		v := st.table[i]
		if v == 0 {
			return -1
		}
		if st.entries[v-1].hash == h {
			return v - 1
		}
	}
}

func (st *stripe) insert(h uint64, slot int32) {
	i := h & st.mask
	for st.table[i] != 0 {
		i = (i + 1) & st.mask
	}
	st.table[i] = slot + 1
}

// remove deletes hash h from the table (backward-shift deletion).
func (st *stripe) remove(h uint64) {
	i := h & st.mask
	for st.entries[st.table[i]-1].hash != h {
		i = (i + 1) & st.mask
	}
	for {
		st.table[i] = 0
		j := i
		for {
			j = (j + 1) & st.mask
			v := st.table[j]
			if v == 0 {
				return
			}
			home := st.entries[v-1].hash & st.mask
			// v may move to i if its home is not in (i, j] cyclically.
			if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
				st.table[i] = v
				i = j
				break
			}
		}
	}
}

// rescale moves t0 to now, dividing every count by the weight of now.
func (st *stripe) rescale(now int64, tau float64) {
	f := math.Exp(-float64(now-st.t0) / 1e9 / tau)
	for i := range st.entries {
		st.entries[i].count *= f
		st.entries[i].err *= f
	}
	st.total *= f
	st.t0 = now
}

func (st *stripe) less(i, j int) bool {
	return st.entries[st.heap[i]].count < st.entries[st.heap[j]].count
}

func (st *stripe) swap(i, j int) {
	st.heap[i], st.heap[j] = st.heap[j], st.heap[i]
	st.entries[st.heap[i]].pos = int32(i)
	st.entries[st.heap[j]].pos = int32(j)
}

func (st *stripe) up(j int) {
	for j > 0 {
		p := (j - 1) / 2
		if !st.less(j, p) {
			return
		}
		st.swap(j, p)
		j = p
	}
}

func (st *stripe) down(j int) {
	n := len(st.heap)
	for {
		l := 2*j + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && st.less(r, l) {
			m = r
		}
		if !st.less(m, j) {
			return
		}
		st.swap(j, m)
		j = m
	}
}

// Key is one heavy key as Top reports it.
type Key struct {
	// Key is the key's text: the key itself, or, for a key longer than
	// MaxKeyBytes or not UTF-8, its first MaxKeyBytes or less with U+FFFD
	// for each byte that is not UTF-8, then "…" and a digest (always a
	// valid label value).
	Key string `json:"key"`
	// Raw is the key's bytes as observed, whatever they are, when it has
	// at most MaxKeyBytes of them; else Key. Raw is what the fleet's hot
	// set holds (Hot.Local, Hot.SetFleet) and what a request of the key is
	// rebuilt from. Not reported: not every byte string is valid JSON text.
	Raw string `json:"-"`
	// Rate is the key's decayed rate, in decisions (cost units) per
	// second, within Error of the true rate.
	Rate float64 `json:"rate"`
	// Error bounds how far Rate may be from the true rate, either way: a
	// stripe over-counts a key by at most the count it inherited, and a
	// stripe that gave the key's place to another had counted at most its
	// smallest count of it, which Rate lacks.
	Error float64 `json:"error"`
	// Share is Rate over the rate of all keys of the summary.
	Share float64 `json:"share"`
}

// Top returns the k heaviest keys at now, heaviest first, with the total
// rate of all keys (decisions per second).
func (s *Summary) Top(k int, now time.Time) ([]Key, float64) {
	type agg struct {
		key, raw   string
		count, err float64
		lows       float64 // the smallest counts of the stripes that hold the key
	}
	// By text, not by hash: two keys reported alike (a crafted key equal
	// to another's truncated text) are one line, never two series with
	// the same labels.
	stripes := s.loaded()
	if stripes == nil { // nothing observed
		return []Key{}, 0
	}
	keys := map[string]*agg{}
	var total, lows float64
	// The figures at now, never at an instant before the latest
	// observation (a wall clock stepped back would scale the counts up:
	// 64 times for a minute, +Inf for hours).
	t := now.UnixNano()
	for i := range stripes {
		st := &stripes[i]
		st.mu.Lock()
		t = max(t, st.last)
		st.mu.Unlock()
	}
	for i := range stripes {
		st := &stripes[i]
		st.mu.Lock()
		// The decay from t0 to now, in the stripe's units.
		f := math.Exp(-float64(t-st.t0) / 1e9 / s.tau)
		if st.t0 == 0 {
			f = 0
		}
		total += st.total * f
		// A key a full stripe does not hold had there at most its
		// smallest count (Space-Saving); a stripe not yet full has
		// evicted nothing, so a key it lacks never came to it.
		var low float64
		if len(st.entries) == st.capacity && len(st.heap) > 0 {
			low = st.entries[st.heap[0]].count * f
		}
		lows += low
		for _, e := range st.entries {
			var a *agg
			if !e.bin {
				if a = keys[string(e.key)]; a == nil {
					a = &agg{key: string(e.key)}
					a.raw = a.key
					keys[a.key] = a
				}
			} else if text := string(appendKey(nil, string(e.key), s.maxKey)); keys[text] != nil {
				a = keys[text]
			} else {
				a = &agg{key: text, raw: string(e.key)}
				keys[text] = a
			}
			a.count += e.count * f
			a.err += e.err * f
			a.lows += low
		}
		st.mu.Unlock()
	}
	out := make([]Key, 0, len(keys))
	for _, a := range keys {
		// Error: what the stripes holding the key may over-count, plus
		// what those that lost it may have counted of it.
		out = append(out, Key{Key: a.key, Raw: a.raw, Rate: a.count / s.tau, Error: (a.err + max(0, lows-a.lows)) / s.tau})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Rate != out[j].Rate {
			return out[i].Rate > out[j].Rate
		}
		return out[i].Key < out[j].Key
	})
	if k >= 0 && len(out) > k {
		out = out[:k]
	}
	rate := total / s.tau
	for i := range out {
		if rate > 0 {
			out[i].Share = min(1, out[i].Rate/rate)
		}
	}
	return out, rate
}
