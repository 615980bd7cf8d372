package hotkeys

import (
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of a Set.
const (
	// DefaultTop is how many keys per rule GET /v1/hotkeys and the metrics
	// report.
	DefaultTop = 10
	// DefaultHotRate is the rate (decisions per second on this instance)
	// at which a key counts as hot for shards: auto; it cools down below
	// half of it.
	DefaultHotRate = 500
	// MaxTop bounds ?k= of GET /v1/hotkeys.
	MaxTop = 1000
)

// KeyRateMetric is the metric of the top keys' rates, labelled with the
// keys themselves (clients' API keys, tenants, addresses): what serves
// /metrics to anyone may leave it out (server.Options.KeyMetrics).
const KeyRateMetric = "sluice_hot_key_rate"

// Set holds the summary of every rule of a daemon, by rule name, across
// reloads (a rule that keeps its name keeps its summary). Safe for
// concurrent use.
type Set struct {
	o       Options
	top     int
	hotRate float64

	mu    sync.Mutex
	rules map[string]*Rule
	rate  *prometheus.Desc
	total *prometheus.Desc
}

// Rule is one rule's summary and its hot set.
type Rule struct {
	*Summary
	Hot Hot
}

// NewSet returns an empty Set whose summaries use o; top is the number of
// keys reported per rule (0: DefaultTop) and hotRate the hot threshold
// (0: DefaultHotRate).
func NewSet(o Options, top int, hotRate float64) *Set {
	if top <= 0 {
		top = DefaultTop
	}
	if hotRate <= 0 {
		hotRate = DefaultHotRate
	}
	return &Set{o: o, top: top, hotRate: hotRate, rules: map[string]*Rule{},
		rate: prometheus.NewDesc(KeyRateMetric, "Decisions per second of the heaviest keys of each rule on this instance (decayed; top keys only).",
			[]string{"rule", "key"}, nil),
		total: prometheus.NewDesc("sluice_hot_keys_total_rate", "Decisions per second of all keys of each rule on this instance (decayed).",
			[]string{"rule"}, nil),
	}
}

// Rule returns the summary of rule name, creating it.
func (s *Set) Rule(name string) *Rule {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rules[name]
	if r == nil {
		sum := New(s.o)
		r = &Rule{Summary: sum, Hot: Hot{On: s.hotRate, Off: s.hotRate / 2, maxKey: sum.maxKey}}
		s.rules[name] = r
	}
	return r
}

// Keep drops the summaries of rules not named (after a reload).
func (s *Set) Keep(names []string) {
	keep := make(map[string]bool, len(names))
	for _, n := range names {
		keep[n] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for n := range s.rules {
		if !keep[n] {
			delete(s.rules, n)
		}
	}
}

func (s *Set) snapshot() ([]string, []*Rule) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.rules))
	for n := range s.rules {
		names = append(names, n)
	}
	sort.Strings(names)
	rs := make([]*Rule, len(names))
	for i, n := range names {
		rs[i] = s.rules[n]
	}
	return names, rs
}

// Refresh recomputes every rule's hot set at now; call it every second or
// so (shards: auto reads the sets).
func (s *Set) Refresh(now time.Time) {
	_, rs := s.snapshot()
	for _, r := range rs {
		top, _ := r.Top(s.top, now)
		r.Hot.Update(top)
	}
}

// Share hands each rule's hot keys (this instance's, as the fleet shares
// them: Key.Raw, a key's bytes whatever they are) to share, which returns
// the fleet's (every key some instance of the fleet finds hot, this one's
// included, the same way): they become hot here too. When
// share's ok is false the rule's fleet set stays as it was.
func (s *Set) Share(share func(rule string, local []string) (fleet []string, ok bool)) {
	names, rs := s.snapshot()
	for i, r := range rs {
		if fleet, ok := share(names[i], r.Hot.Local()); ok {
			r.Hot.SetFleet(fleet)
		}
	}
}

// RuleTop is one rule's entry of GET /v1/hotkeys.
type RuleTop struct {
	Rule string   `json:"rule"`
	Rate float64  `json:"rate"` // all keys, decisions per second
	Keys []Key    `json:"keys"`
	Hot  []string `json:"hot,omitempty"` // keys sharded by shards: auto
}

// Top returns the k heaviest keys of every rule at now.
func (s *Set) Top(k int, now time.Time) []RuleTop {
	names, rs := s.snapshot()
	out := make([]RuleTop, len(rs))
	for i, r := range rs {
		keys, rate := r.Summary.Top(k, now)
		out[i] = RuleTop{Rule: names[i], Rate: rate, Keys: keys, Hot: r.Hot.Keys()}
	}
	return out
}

// ServeHTTP serves GET /v1/hotkeys[?k=N][&rule=NAME]: {"rules": [RuleTop…]}.
func (s *Set) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(status)
		b, _ := json.Marshal(map[string]string{"error": msg})
		w.Write(append(b, '\n'))
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		fail(http.StatusMethodNotAllowed, "method not allowed (want GET, HEAD)")
		return
	}
	k := s.top
	if v := r.URL.Query().Get("k"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxTop {
			fail(http.StatusBadRequest, "k: want a whole number from 1 to "+strconv.Itoa(MaxTop))
			return
		}
		k = n
	}
	all := s.Top(k, time.Now())
	if name := r.URL.Query().Get("rule"); name != "" {
		var one []RuleTop
		for _, t := range all {
			if t.Rule == name {
				one = append(one, t)
			}
		}
		if one == nil {
			fail(http.StatusNotFound, "rule: no rule named "+strconv.Quote(name)+" has seen a decision")
			return
		}
		all = one
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(struct {
		Rules []RuleTop `json:"rules"`
	}{all})
}

// Describe implements prometheus.Collector.
func (s *Set) Describe(ch chan<- *prometheus.Desc) {
	ch <- s.rate
	ch <- s.total
}

// Collect implements prometheus.Collector: the top keys of each rule only,
// so the key label's cardinality is bounded by rules × top.
func (s *Set) Collect(ch chan<- prometheus.Metric) {
	for _, t := range s.Top(s.top, time.Now()) {
		ch <- prometheus.MustNewConstMetric(s.total, prometheus.GaugeValue, t.Rate, t.Rule)
		for _, k := range t.Keys {
			ch <- prometheus.MustNewConstMetric(s.rate, prometheus.GaugeValue, k.Rate, t.Rule, k.Key)
		}
	}
}
