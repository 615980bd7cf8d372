package sluicetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// Step is one request of a table and what it must decide. Fields of Want
// set to NotChecked are not checked.
type Step struct {
	At   time.Duration // since T0
	Key  string        // "" means "k"
	Cost int64         // 0 means 1; use Query for a cost-0 request
	// Query sends cost 0.
	Query bool
	Want  Want
}

// Want is the part of a Decision a step checks. Durations and Remaining
// set to NotChecked (-2) are not checked; RetryAfter -1 is sluice.Never,
// which is checked.
type Want struct {
	Allowed    bool
	Remaining  int64
	RetryAfter time.Duration
	ResetAfter time.Duration
	Delay      time.Duration
}

// NotChecked, in a field of Want, leaves that field unchecked.
const NotChecked = -2

// Table is a named scenario for one algorithm and limit.
type Table struct {
	Name      string
	Algorithm sluice.Algorithm
	Limit     sluice.Limit
	Steps     []Step
}

// RunTable runs one table against s.
func RunTable(t *testing.T, s sluice.Store, tb Table) {
	t.Helper()
	ctx := context.Background()
	prefix := uniq(t, "")
	for i, st := range tb.Steps {
		key := st.Key
		if key == "" {
			key = "k"
		}
		cost := st.Cost
		if cost == 0 && !st.Query {
			cost = 1
		}
		req := sluice.Request{Key: prefix + key, Algorithm: tb.Algorithm, Limit: tb.Limit, Cost: cost, Now: T0.Add(st.At)}
		got, err := s.Take(ctx, req)
		if err != nil {
			t.Fatalf("step %d: Take(%s, t0+%v, cost %d): %v", i, key, st.At, cost, err)
		}
		w := st.Want
		call := fmt.Sprintf("step %d: %s %v Take(%s, t0+%v, cost %d)", i, tb.Algorithm, tb.Limit, key, st.At, cost)
		if got.Allowed != w.Allowed {
			t.Errorf("%s: Allowed = %v, want %v (decision %+v)", call, got.Allowed, w.Allowed, got)
		}
		if w.Remaining != NotChecked && got.Remaining != w.Remaining {
			t.Errorf("%s: Remaining = %d, want %d", call, got.Remaining, w.Remaining)
		}
		if w.RetryAfter != NotChecked && got.RetryAfter != w.RetryAfter {
			t.Errorf("%s: RetryAfter = %v, want %v", call, got.RetryAfter, w.RetryAfter)
		}
		if w.ResetAfter != NotChecked && got.ResetAfter != w.ResetAfter {
			t.Errorf("%s: ResetAfter = %v, want %v", call, got.ResetAfter, w.ResetAfter)
		}
		if w.Delay != NotChecked && got.Delay != w.Delay {
			t.Errorf("%s: Delay = %v, want %v", call, got.Delay, w.Delay)
		}
		if got.Limit != tb.Limit.Rate {
			t.Errorf("%s: Limit = %d, want %d", call, got.Limit, tb.Limit.Rate)
		}
	}
}
