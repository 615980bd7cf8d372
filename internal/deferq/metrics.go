package deferq

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the deferral queue's collectors:
//
//	sluice_deferred_enqueued_total{rule,result}     result: queued, full, unknown, busy
//	sluice_deferred_deliveries_total{rule,status}   requests delivered, by the upstream's status class (2xx, 3xx, 4xx)
//	sluice_deferred_retries_total{rule}             failed sends that will be tried again
//	sluice_deferred_dead_letters_total{rule}        requests moved to the dead-letter stream
//	sluice_deferred_claimed_total{rule}             entries taken over from a silent instance
//	sluice_deferred_queue_length{rule}              requests queued (read from Redis at scrape)
//	sluice_deferred_oldest_age_seconds{rule}        age of the oldest queued request (read from Redis at scrape)
//
// The counters are this instance's; the two gauges are the fleet's.
type metrics struct {
	q                                      *Queue
	enq, deliveries, retries, dead, claims *prometheus.CounterVec
	lengthDesc, ageDesc                    *prometheus.Desc
}

func newMetrics(q *Queue, reg prometheus.Registerer) *metrics {
	m := &metrics{
		q: q,
		enq: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_deferred_enqueued_total",
			Help: "Over-limit requests offered to the deferral queue, by result (queued, full, unknown, busy)."}, []string{"rule", "result"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_deferred_deliveries_total",
			Help: "Deferred requests delivered to the upstream by this instance, by the upstream's status class."}, []string{"rule", "status"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_deferred_retries_total",
			Help: "Deferred requests whose send failed (429, 5xx, no answer) and will be tried again."}, []string{"rule"}),
		dead: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_deferred_dead_letters_total",
			Help: "Deferred requests moved to the dead-letter stream after their last attempt."}, []string{"rule"}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_deferred_claimed_total",
			Help: "Queued requests this instance took over from an instance that went silent."}, []string{"rule"}),
		lengthDesc: prometheus.NewDesc("sluice_deferred_queue_length", "Deferred requests queued and not yet settled (the fleet's, read from Redis).", []string{"rule"}, nil),
		ageDesc:    prometheus.NewDesc("sluice_deferred_oldest_age_seconds", "Age of the oldest deferred request not yet settled (the fleet's, read from Redis); 0 when none.", []string{"rule"}, nil),
	}
	if reg != nil {
		reg.MustRegister(m.enq, m.deliveries, m.retries, m.dead, m.claims, m)
	}
	return m
}

func (m *metrics) enqueued(rule, result string) { m.enq.WithLabelValues(rule, result).Inc() }
func (m *metrics) retried(rule string)          { m.retries.WithLabelValues(rule).Inc() }
func (m *metrics) deadLettered(rule string)     { m.dead.WithLabelValues(rule).Inc() }
func (m *metrics) claimed(rule string, n int)   { m.claims.WithLabelValues(rule).Add(float64(n)) }
func (m *metrics) delivered(rule string, status int) {
	m.deliveries.WithLabelValues(rule, strconv.Itoa(status/100)+"xx").Inc()
}

// Describe implements prometheus.Collector for the two gauges.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.lengthDesc
	ch <- m.ageDesc
}

// Collect reads each defer rule's queue length and oldest entry from Redis
// (bounded by a second in all).
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.q.mu.Lock()
	names := make([]string, 0, len(m.q.rules))
	for n := range m.q.rules {
		names = append(names, n)
	}
	m.q.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, name := range names {
		n, age, err := m.q.Depth(ctx, name)
		if err != nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(m.lengthDesc, prometheus.GaugeValue, float64(n), name)
		ch <- prometheus.MustNewConstMetric(m.ageDesc, prometheus.GaugeValue, age.Seconds(), name)
	}
}

// Depth returns how many requests rule has queued and not yet settled, and
// the age of the oldest.
func (q *Queue) Depth(ctx context.Context, rule string) (int64, time.Duration, error) {
	c := q.o.Connect()
	if c == nil {
		return 0, 0, errNotConnected
	}
	key := q.base(Tag(rule)) + "q"
	n, err := c.Do(ctx, c.B().Xlen().Key(key).Build()).AsInt64()
	if err != nil || n == 0 {
		return 0, 0, err
	}
	es, err := c.Do(ctx, c.B().Xrange().Key(key).Start("-").End("+").Count(1).Build()).AsXRange()
	if err != nil || len(es) == 0 {
		return n, 0, err
	}
	ms, _, _ := strings.Cut(es[0].ID, "-")
	t, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return n, 0, nil
	}
	return n, max(0, time.Since(time.UnixMilli(t))), nil
}
