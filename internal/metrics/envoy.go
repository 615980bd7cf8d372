package metrics

import (
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

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

// shortLabel returns label as a label value: label itself when it is
// UTF-8 of at most MaxDescriptorLabelBytes; else cut as that constant
// says, each byte that is not UTF-8 written as U+FFFD, with the digest of
// the label's bytes. A label value must be UTF-8 (client_golang panics on
// another), and a request value need not be: Envoy sends a header's bytes
// as they are. The digest keeps two values a byte apart ("caf\xe9",
// "caf\xe8") two series, as hot keys show such keys.
func shortLabel(label string) string {
	if len(label) <= MaxDescriptorLabelBytes && utf8.ValidString(label) {
		return label
	}
	room := MaxDescriptorLabelBytes - labelDigest
	b := make([]byte, 0, MaxDescriptorLabelBytes)
	for _, r := range label { // r is utf8.RuneError for a byte that is not UTF-8
		if len(b)+utf8.RuneLen(r) > room {
			break
		}
		b = utf8.AppendRune(b, r)
	}
	h := uint64(14695981039346656037) // FNV-1a
	for i := 0; i < len(label); i++ {
		h ^= uint64(label[i])
		h *= 1099511628211
	}
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
//	sluice_envoy_negative_hits_total{domain,descriptor} hits given back (is_negative_hits), not in hits_total
//	sluice_envoy_negative_hits_failed_total{domain,descriptor} of those, hits the store could not give back (they stay counted)
//	sluice_envoy_unknown_domain_total                 requests for a domain with no config
type Envoy struct {
	hits, over, near, shadow, negative, negFailed *prometheus.CounterVec
	unknown                                       prometheus.Counter

	mu       sync.RWMutex
	ds       map[[2]string]*EnvoyDescriptor
	detailed int
	fromReq  map[[2]string]bool // the labels of ds built from request values (not "_other")
}

// EnvoyDescriptor holds the counters of one domain and descriptor label.
// A nil *EnvoyDescriptor records nothing.
type EnvoyDescriptor struct {
	hits, over, near, shadow, negative, negFailed prometheus.Counter
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
		hits:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_envoy_hits_total", Help: "Envoy rate limit service: hits (hits_addend) asked for, per domain and descriptor."}, lv),
		over:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_envoy_over_limit_total", Help: "Envoy rate limit service: hits over the limit (shadow_mode descriptors excluded)."}, lv),
		near:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_envoy_near_limit_total", Help: "Envoy rate limit service: admitted hits within the last 20% of the limit."}, lv),
		shadow:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_envoy_shadow_mode_total", Help: "Envoy rate limit service: hits a shadow_mode descriptor would have denied."}, lv),
		negative:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_envoy_negative_hits_total", Help: "Envoy rate limit service: hits given back (is_negative_hits), per domain and descriptor."}, lv),
		negFailed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_envoy_negative_hits_failed_total", Help: "Envoy rate limit service: hits given back (is_negative_hits) that the store could not take back; they stay counted."}, lv),
		unknown:   prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_envoy_unknown_domain_total", Help: "Envoy rate limit service: requests for a domain that no descriptor file configures."}),
		ds:        map[[2]string]*EnvoyDescriptor{},
		fromReq:   map[[2]string]bool{},
	}
	m.reg.MustRegister(e.hits, e.over, e.near, e.shadow, e.negative, e.negFailed, e.unknown)
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
	// The series outlive the request, whose strings may be substrings of
	// its whole message (the gRPC codec's): keep copies.
	k = [2]string{strings.Clone(k[0]), strings.Clone(k[1])}
	if detailed {
		if e.detailed >= MaxDetailedDescriptors {
			k[1] = "_other"
			if d = e.ds[k]; d != nil {
				return d
			}
		} else {
			e.detailed++
			e.fromReq[k] = true
		}
	}
	d = &EnvoyDescriptor{
		hits: e.hits.WithLabelValues(k[0], k[1]), over: e.over.WithLabelValues(k[0], k[1]),
		near: e.near.WithLabelValues(k[0], k[1]), shadow: e.shadow.WithLabelValues(k[0], k[1]),
		negative: e.negative.WithLabelValues(k[0], k[1]), negFailed: e.negFailed.WithLabelValues(k[0], k[1]),
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

// GaveBack records hits given back (is_negative_hits).
func (d *EnvoyDescriptor) GaveBack(hits int64) {
	if d != nil {
		d.negative.Add(float64(hits))
	}
}

// GiveBackFailed records hits given back (is_negative_hits) that the
// store could not take back: they stay counted.
func (d *EnvoyDescriptor) GiveBackFailed(hits int64) {
	if d != nil {
		d.negFailed.Add(float64(hits))
	}
}

// ClientSeries reports whether the series of the family named family
// with labels carries values that clients sent: an Envoy counter whose
// descriptor label was built from a request's values (detailed_metric,
// value_to_metric, a limit override), which can hold user IDs and API
// keys. A scrape that may not see clients' keys leaves such series out
// (server.Options.KeySeries).
func (m *Metrics) ClientSeries(family string, labels []*dto.LabelPair) bool {
	if m == nil || !strings.HasPrefix(family, "sluice_envoy_") {
		return false
	}
	m.mu.RLock()
	e := m.envoy
	m.mu.RUnlock()
	if e == nil {
		return false
	}
	var k [2]string
	for _, l := range labels {
		switch l.GetName() {
		case "domain":
			k[0] = l.GetValue()
		case "descriptor":
			k[1] = l.GetValue()
		}
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.fromReq[k]
}
