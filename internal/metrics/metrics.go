// Package metrics holds Sluice's Prometheus collectors, registered on an
// injected registry (never the global one).
//
// The names are those of SPEC §5:
//
//	sluice_decisions_total{rule,result}        result: allowed, denied, shadow_denied
//	sluice_store_errors_total                  store calls that could not decide
//	sluice_decision_duration_seconds           time to decide one request (histogram)
//	sluice_config_reloads_total{result}        result: success, failure
//
// and, beyond the SPEC:
//
//	sluice_store_fallback_total{policy}        decisions made by store.on_error (allow, deny)
//	sluice_delay_seconds                       time requests waited under action delay
//	sluice_delay_given_back_total{rule}        leaky bucket slots given back (not left in)
//	sluice_ambiguous_keys_total{rule}          requests refused: their key part for rule was ambiguous
//	sluice_clients_gone_total{rule,stage}      requests answered 499 (CANCELLED over gRPC), their client gone; stage: decision, held, upstream
//	sluice_connections_open{listener}          client connections held (listener.go)
//	sluice_connections_closed_slow_total{listener}, sluice_connections_refused_total{listener},
//	sluice_requests_refused_total{listener}, sluice_body_timeouts_total{listener},
//	sluice_connections_closed_resets_total{listener}
//	                                           slow, refused and rapid-reset clients (listener.go)
//	sluice_envoy_*                             the Envoy rate limit service's (envoy.go)
//
// docs/http.md and docs/envoy.md list them for operators, with their
// labels (TestMetricsScrapeMatchesDocs in internal/server holds the two
// to each other).
//
// A nil *Metrics is valid and records nothing, so packages can be used
// (and tested) without Prometheus.
package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Results of sluice_decisions_total.
const (
	Allowed      = "allowed"
	Denied       = "denied"
	ShadowDenied = "shadow_denied"
)

// Stages of sluice_clients_gone_total: where a request was when its
// client went away.
const (
	// GoneDecision: before the store answered; no rule has a verdict.
	GoneDecision = "decision"
	// GoneHeld: while action delay held it (waiting out its slot, or for
	// room).
	GoneHeld = "held"
	// GoneUpstream: admitted and forwarded, before the upstream answered.
	GoneUpstream = "upstream"
)

// Metrics is the set of Sluice collectors. It is safe for concurrent use.
type Metrics struct {
	reg       prometheus.Registerer
	decisions *prometheus.CounterVec
	storeErrs prometheus.Counter
	fallback  *prometheus.CounterVec
	duration  prometheus.Histogram
	delay     prometheus.Histogram
	reloads   *prometheus.CounterVec
	ambiguous *prometheus.CounterVec
	givenBack *prometheus.CounterVec
	gone      *prometheus.CounterVec

	mu    sync.RWMutex
	rules map[string]*Rule
	envoy *Envoy

	connsOnce sync.Once // connection metrics (listener.go), made on first use
	connC     *connCollectors
}

// Rule holds the pre-resolved decision counters of one rule, so the hot
// path does no label lookup. Get one with Metrics.Rule; a nil *Rule records
// nothing.
type Rule struct {
	allowed, denied, shadowDenied prometheus.Counter
	ambiguous                     prometheus.Counter
	givenBack                     prometheus.Counter
	goneDecision, goneHeld        prometheus.Counter
	goneUpstream                  prometheus.Counter
}

// New creates the collectors and registers them on reg. It panics if they
// are already registered on reg (a programming error, as with
// prometheus.MustRegister); give each daemon its own registry.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		reg: reg,
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decisions_total",
			Help: "Rate-limit decisions per rule, by result (allowed, denied, shadow_denied).",
		}, []string{"rule", "result"}),
		storeErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_store_errors_total",
			Help: "Store calls that could not decide (store unreachable, timed out).",
		}),
		fallback: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_store_fallback_total",
			Help: "Requests decided by store.on_error while the store failed, by policy (allow, deny).",
		}, []string{"policy"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_decision_duration_seconds",
			Help:    "Time to decide one request against all its rules (store round trips included, waiting excluded).",
			Buckets: prometheus.ExponentialBuckets(10e-6, 4, 10), // 10µs … 2.6s
		}),
		delay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_delay_seconds",
			Help:    "Time each request admitted under action delay waited for its slot (0 for those admitted at once).",
			Buckets: prometheus.ExponentialBuckets(1e-3, 4, 8), // 1ms … 16s
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_config_reloads_total",
			Help: "Config reloads, by result (success, failure).",
		}, []string{"result"}),
		ambiguous: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_ambiguous_keys_total",
			Help: "Requests refused (400 ambiguous_key) because their key part for the rule was sent under another spelling of its name or with more than 4 values.",
		}, []string{"rule"}),
		givenBack: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_delay_given_back_total",
			Help: "Leaky bucket slots given back, per rule: taken by a request that then did not leave in them (its client went away while it waited under action delay, or it was refused, its slot past max_delay).",
		}, []string{"rule"}),
		gone: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_clients_gone_total",
			Help: "Requests the rule applied to whose client went away before their answer (answered 499, CANCELLED over gRPC), by stage: decision (before the store answered), held (while action delay held it), upstream (forwarded, before the upstream answered).",
		}, []string{"rule", "stage"}),
		rules: map[string]*Rule{},
	}
	reg.MustRegister(m.decisions, m.storeErrs, m.fallback, m.duration, m.delay, m.reloads, m.ambiguous, m.givenBack, m.gone)
	// Show both reload results and both fallback policies from the start, at 0.
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failure")
	m.fallback.WithLabelValues("allow")
	m.fallback.WithLabelValues("deny")
	return m
}

// Rule returns the counters of the rule named name, creating them on first
// use. Resolve it once per rule (when rules are compiled), not per request.
func (m *Metrics) Rule(name string) *Rule {
	if m == nil {
		return nil
	}
	m.mu.RLock()
	r := m.rules[name]
	m.mu.RUnlock()
	if r != nil {
		return r
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if r = m.rules[name]; r == nil {
		r = &Rule{
			allowed:      m.decisions.WithLabelValues(name, Allowed),
			denied:       m.decisions.WithLabelValues(name, Denied),
			shadowDenied: m.decisions.WithLabelValues(name, ShadowDenied),
			ambiguous:    m.ambiguous.WithLabelValues(name),
			givenBack:    m.givenBack.WithLabelValues(name),
			goneDecision: m.gone.WithLabelValues(name, GoneDecision),
			goneHeld:     m.gone.WithLabelValues(name, GoneHeld),
			goneUpstream: m.gone.WithLabelValues(name, GoneUpstream),
		}
		m.rules[name] = r
	}
	return r
}

// RuleNames returns the names of the rules whose counters exist.
func (m *Metrics) RuleNames() map[string]bool {
	if m == nil {
		return nil
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	names := make(map[string]bool, len(m.rules))
	for n := range m.rules {
		names[n] = true
	}
	return names
}

// ForgetRules drops the counters of the rules named, which must have
// decided nothing: those of a config refused after its engine was built.
// The counters of rules once in force are kept, as counters are.
func (m *Metrics) ForgetRules(names []string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range names {
		delete(m.rules, n)
		for _, res := range []string{Allowed, Denied, ShadowDenied} {
			m.decisions.DeleteLabelValues(n, res)
		}
		m.ambiguous.DeleteLabelValues(n)
		m.givenBack.DeleteLabelValues(n)
		for _, st := range []string{GoneDecision, GoneHeld, GoneUpstream} {
			m.gone.DeleteLabelValues(n, st)
		}
	}
}

// Allowed counts one allowed decision.
func (r *Rule) Allowed() {
	if r != nil {
		r.allowed.Inc()
	}
}

// Denied counts one denied decision.
func (r *Rule) Denied() {
	if r != nil {
		r.denied.Inc()
	}
}

// ShadowDenied counts one decision a shadow rule would have denied.
func (r *Rule) ShadowDenied() {
	if r != nil {
		r.shadowDenied.Inc()
	}
}

// Ambiguous counts one request refused for an ambiguous key part.
func (r *Rule) Ambiguous() {
	if r != nil {
		r.ambiguous.Inc()
	}
}

// GivenBack counts one leaky bucket slot given back (a request that did
// not leave in it).
func (r *Rule) GivenBack() {
	if r != nil {
		r.givenBack.Inc()
	}
}

// ClientGone counts, under the rule named rule, one request whose client
// went away at stage (GoneDecision, GoneHeld, GoneUpstream), without
// making the rule's other series: the Envoy service's descriptors
// (rule "envoy/DOMAIN/PATH") have counters of their own (Envoy).
func (m *Metrics) ClientGone(rule, stage string) {
	if m == nil {
		return
	}
	switch stage {
	case GoneDecision, GoneHeld, GoneUpstream:
		m.gone.WithLabelValues(rule, stage).Inc()
	}
}

// Gone counts one request whose client went away at stage (GoneDecision,
// GoneHeld, GoneUpstream).
func (r *Rule) Gone(stage string) {
	if r == nil {
		return
	}
	switch stage {
	case GoneDecision:
		r.goneDecision.Inc()
	case GoneHeld:
		r.goneHeld.Inc()
	case GoneUpstream:
		r.goneUpstream.Inc()
	}
}

// StoreError counts one store call that could not decide.
func (m *Metrics) StoreError() {
	if m != nil {
		m.storeErrs.Inc()
	}
}

// Fallback counts one request decided by the on_error policy ("allow" or
// "deny").
func (m *Metrics) Fallback(policy string) {
	if m != nil {
		m.fallback.WithLabelValues(policy).Inc()
	}
}

// ObserveDecision records how long one decision took.
func (m *Metrics) ObserveDecision(d time.Duration) {
	if m != nil {
		m.duration.Observe(d.Seconds())
	}
}

// ObserveDelay records how long an admitted request waited under action delay.
func (m *Metrics) ObserveDelay(d time.Duration) {
	if m != nil {
		m.delay.Observe(d.Seconds())
	}
}

// Reload counts one config reload: ok true for success, false for failure.
func (m *Metrics) Reload(ok bool) {
	if m == nil {
		return
	}
	if ok {
		m.reloads.WithLabelValues("success").Inc()
	} else {
		m.reloads.WithLabelValues("failure").Inc()
	}
}

// GaugeFunc registers a gauge named name whose value is read from f at each
// scrape, such as the memory store's key count (sluice_memstore_keys). It
// returns the registration error, if any.
func (m *Metrics) GaugeFunc(name, help string, f func() float64) error {
	if m == nil {
		return nil
	}
	return m.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
}

// CounterFunc registers a counter named name whose value is read from f at
// each scrape, such as the memory store's evictions
// (sluice_memstore_evictions_total). f must never decrease.
func (m *Metrics) CounterFunc(name, help string, f func() float64) error {
	if m == nil {
		return nil
	}
	return m.reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
}
