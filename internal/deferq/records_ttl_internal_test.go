package deferq

import (
	"context"
	"testing"
	"time"
)

// The fleet's gap between two steps of the pass over the records, read
// from the cursor's expiry, never stops the pass for good: a cursor with
// no expiry (written by hand, or by a build that set none) lets the next
// step run, which gives it one; and with a gap as long as the cursor's
// life or longer, a pass whose cursor is gone (never made, or expired)
// steps. PTTL answers -1 and -2 there, which a gap past the cursor's life
// read as a step just made: the cursor was never written again, and the
// pass never stepped.
func TestRecordsPassGapNeverStopsIt(t *testing.T) {
	for _, tc := range []struct {
		name string
		// noTTL: the cursor is there, with no expiry.
		noTTL bool
		gap   time.Duration
	}{
		{name: "a cursor with no expiry", noTTL: true, gap: time.Hour},
		{name: "no cursor, a gap past the cursor's life", gap: queuedTTL + time.Hour},
		{name: "a cursor with no expiry, a gap past the cursor's life", noTTL: true, gap: queuedTTL + time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, c := jobsWorker(t)
			ctx := context.Background()
			if err := c.Do(ctx, c.B().XgroupCreate().Key(w.base+"q").Group(group).Id("0").Mkstream().Build()).Error(); err != nil {
				t.Fatal(err)
			}
			if tc.noTTL {
				if err := c.Do(ctx, c.B().Set().Key(w.base+"records").Value("0").Build()).Error(); err != nil {
					t.Fatal(err)
				}
			}
			rec := w.base + "s:" + w.tag + "-00000000000000000001"
			if err := c.Do(ctx, c.B().Hset().Key(rec).FieldValue().FieldValue("state", "queued").FieldValue("sid", "1-1").Build()).Error(); err != nil {
				t.Fatal(err)
			}
			w.recordsEvery = tc.gap
			w.passRecords(ctx, c)
			if n, err := c.Do(ctx, c.B().Exists().Key(rec).Build()).AsInt64(); err != nil || n != 0 {
				t.Errorf("the record of a request gone after a step: %d (%v), want deleted: the pass did not step", n, err)
			}
			if pttl, err := c.Do(ctx, c.B().Pttl().Key(w.base+"records").Build()).AsInt64(); err != nil || pttl <= 0 {
				t.Errorf("PTTL of the pass's cursor after a step: %d (%v), want an expiry", pttl, err)
			}
		})
	}
}
