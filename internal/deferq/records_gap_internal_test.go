package deferq

import (
	"context"
	"testing"
	"time"
)

// The pass over the rule's records takes one step a claim interval for
// the whole fleet: a second instance that asks right after the first
// takes none, so its SCAN load on Redis does not grow with the instances.
// Once the interval is over, the next step cleans what the skipped one
// would have.
func TestRecordsPassOneStepAnIntervalForTheFleet(t *testing.T) {
	a, c := jobsWorker(t)
	ctx := context.Background()
	if err := c.Do(ctx, c.B().XgroupCreate().Key(a.base+"q").Group(group).Id("0").Mkstream().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	b := newWorker(a.q, &Rule{Name: "jobs"}, "y")
	a.recordsEvery, b.recordsEvery = time.Hour, time.Hour
	a.passRecords(ctx, c) // the first step: nothing to clean yet

	// A record whose request is gone from the stream (an earlier
	// version's, trimmed away): the next step cleans it.
	rec := a.base + "s:" + a.tag + "-00000000000000000001"
	if err := c.Do(ctx, c.B().Hset().Key(rec).FieldValue().FieldValue("state", "queued").FieldValue("sid", "1-1").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	exists := func() int64 {
		t.Helper()
		n, err := c.Do(ctx, c.B().Exists().Key(rec).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	b.passRecords(ctx, c)
	if exists() != 1 {
		t.Fatal("a second instance stepped within the interval of the first's step: the record was cleaned")
	}
	b.recordsEvery = 0 // as if the interval were over
	b.passRecords(ctx, c)
	if exists() != 0 {
		t.Fatal("the step after the interval left the record of a request gone")
	}
}
