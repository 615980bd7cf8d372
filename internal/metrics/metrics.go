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
//	sluice_ambiguous_keys_total{rule}          requests refused: their key part for rule was ambiguous
//	sluice_connections_open{listener}          client connections held (listener.go)
//	sluice_connections_closed_slow_total{listener}, sluice_connections_refused_total{listener},
//	sluice_body_timeouts_total{listener}       slow and refused clients (listener.go)
//
// A nil *Metrics is valid and records nothing, so packages can be used
// (and tested) without Prometheus.
package metrics

import (
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// Results of sluice_decisions_total.
const (
	Allowed      = "allowed"
	Denied       = "denied"
	ShadowDenied = "shadow_denied"
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
			Help:    "Time admitted requests waited for a slot under action delay.",
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
		rules: map[string]*Rule{},
	}
	reg.MustRegister(m.decisions, m.storeErrs, m.fallback, m.duration, m.delay, m.reloads, m.ambiguous)
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

// MaxDetailedDescriptors bounds the descriptor labels of the Envoy metrics
// that carry request values (detailed_metric, value_to_metric, limit
// overrides): past it, such hits are counted under the label "_other".
const MaxDetailedDescriptors = 1000

// MaxDescriptorLabelBytes bounds the length of a descriptor label that
// carries request values: a longer one keeps its first bytes, cut between
// characters, then "…" and 16 hex digits of a digest of the whole label
// (FNV-1a, 64 bits: the same on every instance), so that labels alike in
// their first bytes stay apart. A gRPC request may carry 1 MiB of values.
const MaxDescriptorLabelBytes = 256

// labelDigest is what shortLabel appends after the kept bytes: "…" (3
// bytes) and 16 hex digits.
const labelDigest = 3 + 16

// shortLabel returns label, cut to MaxDescriptorLabelBytes as that
// constant says when longer. label is UTF-8 (protobuf strings are).
func shortLabel(label string) string {
	if len(label) <= MaxDescriptorLabelBytes {
		return label
	}
	n := MaxDescriptorLabelBytes - labelDigest
	for n > 0 && !utf8.RuneStart(label[n]) {
		n--
	}
	h := uint64(14695981039346656037) // FNV-1a
	for i := 0; i < len(label); i++ {
		h ^= uint64(label[i])
		h *= 1099511628211
	}
	b := make([]byte, 0, n+labelDigest)
	b = append(b, label[:n]...)
	b = append(b, "…"...)
	for sh := 60; sh >= 0; sh -= 4 {
		b = append(b, "0123456789abcdef"[h>>sh&15])
	}
	return string(b)
}

// Envoy holds the per-domain, per-descriptor counters of the Envoy rate
// limit service:
//
//	sluice_envoy_hits_total{domain,descriptor}        hits (hits_addend) asked for
//	sluice_envoy_over_limit_total{domain,descriptor}  hits over the limit (not shadow)
//	sluice_envoy_near_limit_total{domain,descriptor}  admitted hits within the last 20% of the limit (above floor(0.8 × limit))
//	sluice_envoy_shadow_mode_total{domain,descriptor} hits a shadow_mode descriptor would have denied
//	sluice_envoy_unknown_domain_total                 requests for a domain with no config
type Envoy struct {
	hits, over, near, shadow *prometheus.CounterVec
	unknown                  prometheus.Counter

	mu       sync.RWMutex
	ds       map[[2]string]*EnvoyDescriptor
	detailed int
}

// EnvoyDescriptor holds the counters of one domain and descriptor label.
// A nil *EnvoyDescriptor records nothing.
type EnvoyDescriptor struct {
	hits, over, near, shadow prometheus.Counter
}

// Envoy returns the Envoy rate limit service's counters, registering them
// on first use.
func (m *Metrics) Envoy() *Envoy {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.envoy != nil {
		return m.envoy
	}
	lv := []string{"domain", "descriptor"}
	e := &Envoy{
		hits:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_envoy_hits_total", Help: "Envoy rate limit service: hits (hits_addend) asked for, per domain and descriptor."}, lv),
		over:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_envoy_over_limit_total", Help: "Envoy rate limit service: hits over the limit (shadow_mode descriptors excluded)."}, lv),
		near:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_envoy_near_limit_total", Help: "Envoy rate limit service: admitted hits within the last 20% of the limit."}, lv),
		shadow:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_envoy_shadow_mode_total", Help: "Envoy rate limit service: hits a shadow_mode descriptor would have denied."}, lv),
		unknown: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_envoy_unknown_domain_total", Help: "Envoy rate limit service: requests for a domain that no descriptor file configures."}),
		ds:      map[[2]string]*EnvoyDescriptor{},
	}
	m.reg.MustRegister(e.hits, e.over, e.near, e.shadow, e.unknown)
	m.envoy = e
	return e
}

// Descriptor returns the counters of domain and descriptor. detailed marks
// a label built from request values: at most MaxDetailedDescriptors of
// those are kept, the rest share the label "_other", and each is cut to
// MaxDescriptorLabelBytes.
func (e *Envoy) Descriptor(domain, descriptor string, detailed bool) *EnvoyDescriptor {
	if e == nil {
		return nil
	}
	if detailed {
		descriptor = shortLabel(descriptor)
	}
	k := [2]string{domain, descriptor}
	e.mu.RLock()
	d := e.ds[k]
	e.mu.RUnlock()
	if d != nil {
		return d
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if d = e.ds[k]; d != nil {
		return d
	}
	if detailed {
		if e.detailed >= MaxDetailedDescriptors {
			k[1] = "_other"
			if d = e.ds[k]; d != nil {
				return d
			}
		} else {
			e.detailed++
		}
	}
	d = &EnvoyDescriptor{
		hits: e.hits.WithLabelValues(k[0], k[1]), over: e.over.WithLabelValues(k[0], k[1]),
		near: e.near.WithLabelValues(k[0], k[1]), shadow: e.shadow.WithLabelValues(k[0], k[1]),
	}
	e.ds[k] = d
	return d
}

// UnknownDomain counts one request for a domain without config.
func (e *Envoy) UnknownDomain() {
	if e != nil {
		e.unknown.Inc()
	}
}

// Count records hits asked for: all of them over the limit (over), let
// through by a shadow descriptor (shadow), or admitted, near of them
// within the last 20% of the limit.
func (d *EnvoyDescriptor) Count(hits int64, over, shadow bool, near int64) {
	if d == nil {
		return
	}
	h := float64(hits)
	d.hits.Add(h)
	switch {
	case over && shadow:
		d.shadow.Add(h)
	case over:
		d.over.Add(h)
	case near > 0:
		d.near.Add(float64(near))
	}
}
