package daemon

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/fleet"
)

// The fleet store's metrics: the decorators' counters, by interval and
// chunk, and each rule's mode. Labels come from the config (rule names,
// intervals, chunks), never from request keys.

// fleetCollector exports the decorators' counters and each rule's mode.
type fleetCollector struct{ f *fleetStore }

// The bounds on the keys held, for the HELP texts (an operator reads a
// number, not a Go name).
var (
	syncMax  = strconv.Itoa(fleet.DefaultSyncMaxKeys)
	leaseMax = strconv.Itoa(fleet.DefaultLeaseMaxKeys)
)

var (
	descSyncBatches   = prometheus.NewDesc("sluice_fleet_sync_batches_total", "Sync batches sent to Redis, by interval.", []string{"interval"}, nil)
	descSyncKeys      = prometheus.NewDesc("sluice_fleet_sync_batch_keys_total", "Keys in the sync batches, summed, by interval (divide by the batches for the mean batch size).", []string{"interval"}, nil)
	descSyncErrors    = prometheus.NewDesc("sluice_fleet_sync_batch_errors_total", "Sync batches that failed (their hits go out with the next one), by interval.", []string{"interval"}, nil)
	descSyncLoads     = prometheus.NewDesc("sluice_fleet_sync_loads_total", "Keys read from Redis before a decision (asked for again after a cold decision, or idle for two intervals), by interval.", []string{"interval"}, nil)
	descSyncLocal     = prometheus.NewDesc("sluice_fleet_sync_decisions_total", "Decisions made locally by sync rules, by interval.", []string{"interval"}, nil)
	descSyncOverflow  = prometheus.NewDesc("sluice_fleet_sync_overflow_total", "Decisions of sync rules made exactly in Redis because the instance held its most keys ("+syncMax+") and the key was new, by interval.", []string{"interval"}, nil)
	descSyncCold      = prometheus.NewDesc("sluice_fleet_sync_cold_total", "Decisions of sync rules made exactly in Redis because the key was asked for the first time in two intervals (a key asked for once gains nothing from a local view), by interval.", []string{"interval"}, nil)
	descSyncOvershoot = prometheus.NewDesc("sluice_fleet_sync_overshoot_max", "The most requests a sync batch found a key admitted beyond its limit, by interval: the fleet's error as this instance can see it.", []string{"interval"}, nil)
	descSyncHeld      = prometheus.NewDesc("sluice_fleet_sync_keys", "Keys a sync interval holds now (a view and the hits not yet sent each; at most "+syncMax+"), by interval.", []string{"interval"}, nil)
	descLeaseHeld     = prometheus.NewDesc("sluice_fleet_lease_keys", "Keys a lease chunk holds now (at most "+leaseMax+"), by chunk.", []string{"chunk"}, nil)
	descLeaseCalls    = prometheus.NewDesc("sluice_fleet_lease_reservations_total", "Lease reservations asked of Redis, by chunk.", []string{"chunk"}, nil)
	descLeaseGranted  = prometheus.NewDesc("sluice_fleet_lease_units_granted_total", "Units of quota reserved, by chunk.", []string{"chunk"}, nil)
	descLeaseReturned = prometheus.NewDesc("sluice_fleet_lease_units_returned_total", "Units of quota given back (expired, charged by a report, or let go by a reload or shutdown), by chunk.", []string{"chunk"}, nil)
	descLeaseSpent    = prometheus.NewDesc("sluice_fleet_lease_units_spent_total", "Units of quota spent on admitted requests, by chunk.", []string{"chunk"}, nil)
	descLeaseOverflow = prometheus.NewDesc("sluice_fleet_lease_overflow_total", "Decisions of lease rules made exactly in Redis because the instance held its most keys ("+leaseMax+"), none could be let go, and the key was new, by chunk.", []string{"chunk"}, nil)
	descLeaseCold     = prometheus.NewDesc("sluice_fleet_lease_cold_total", "Decisions of lease rules made exactly in Redis because the key was asked for the first time in a second or two (a lease for a key asked for once would hold quota it does not spend), by chunk.", []string{"chunk"}, nil)
	descRuleMode      = prometheus.NewDesc("sluice_rule_fleet_mode", "How each rule counts across the fleet: 1 for its mode (exact, sync or lease).", []string{"rule", "mode"}, nil)
)

func (c fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSyncBatches, descSyncKeys, descSyncErrors, descSyncLoads, descSyncLocal, descSyncOverflow, descSyncCold, descSyncOvershoot, descSyncHeld,
		descLeaseHeld, descLeaseCalls, descLeaseGranted, descLeaseReturned, descLeaseSpent, descLeaseOverflow, descLeaseCold, descRuleMode} {
		ch <- d
	}
}

func (c fleetCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	counter := func(d *prometheus.Desc, v uint64, label string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), label)
	}
	// Each interval's and chunk's counters: its decorator in force, those
	// being retired, and those retired.
	syncs := map[time.Duration]fleet.SyncStats{}
	for iv, st := range f.doneSyncs {
		syncs[iv] = st
	}
	for s, iv := range f.closingSyncs {
		syncs[iv] = addSyncStats(syncs[iv], s.Stats())
	}
	for iv, s := range f.syncs {
		st := s.Stats()
		syncs[iv] = addSyncStats(syncs[iv], st)
		// The gauges are those of the interval in force.
		ch <- prometheus.MustNewConstMetric(descSyncOvershoot, prometheus.GaugeValue, float64(st.MaxOvershoot), iv.String())
		ch <- prometheus.MustNewConstMetric(descSyncHeld, prometheus.GaugeValue, float64(st.Keys), iv.String())
	}
	for iv, st := range syncs {
		l := iv.String()
		counter(descSyncBatches, st.Batches, l)
		counter(descSyncKeys, st.BatchKeys, l)
		counter(descSyncErrors, st.BatchErrors, l)
		counter(descSyncLoads, st.Loads, l)
		counter(descSyncLocal, st.Local, l)
		counter(descSyncOverflow, st.Overflow, l)
		counter(descSyncCold, st.Cold, l)
	}
	leases := map[int]fleet.LeaseStats{}
	for chunk, st := range f.doneLeases {
		leases[chunk] = st
	}
	for l, chunk := range f.closingLeases {
		leases[chunk] = addLeaseStats(leases[chunk], l.Stats())
	}
	for chunk, l := range f.leases {
		st := l.Stats()
		leases[chunk] = addLeaseStats(leases[chunk], st)
		ch <- prometheus.MustNewConstMetric(descLeaseHeld, prometheus.GaugeValue, float64(st.Keys), chunkLabel(chunk))
	}
	for chunk, st := range leases {
		l := chunkLabel(chunk)
		counter(descLeaseCalls, st.Calls, l)
		counter(descLeaseGranted, st.Granted, l)
		counter(descLeaseReturned, st.Returned, l)
		counter(descLeaseSpent, st.Spent, l)
		counter(descLeaseOverflow, st.Overflow, l)
		counter(descLeaseCold, st.Cold, l)
	}
	seen := map[string]bool{}
	for _, m := range f.routes.Load().modes {
		if !seen[m.rule] {
			seen[m.rule] = true
			ch <- prometheus.MustNewConstMetric(descRuleMode, prometheus.GaugeValue, 1, m.rule, m.name())
		}
	}
}

// addSyncStats sums the counters of a and b (not their gauges).
func addSyncStats(a, b fleet.SyncStats) fleet.SyncStats {
	a.Batches += b.Batches
	a.BatchKeys += b.BatchKeys
	a.BatchErrors += b.BatchErrors
	a.Loads += b.Loads
	a.Local += b.Local
	a.Overflow += b.Overflow
	a.Cold += b.Cold
	return a
}

// addLeaseStats sums the counters of a and b (not their gauges).
func addLeaseStats(a, b fleet.LeaseStats) fleet.LeaseStats {
	a.Calls += b.Calls
	a.Granted += b.Granted
	a.Returned += b.Returned
	a.Spent += b.Spent
	a.Local += b.Local
	a.Overflow += b.Overflow
	a.Cold += b.Cold
	return a
}
