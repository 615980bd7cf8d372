package deferq

import (
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// With the default attempts and back-off, a request outlives an upstream
// that is down for at least two minutes (a restart, a deploy): between its
// first failed send and its last attempt lie 1+2+4+8+16+32+60+60+60 =
// 243 s (README, "Deferring"). The waits are read as the worker gets them,
// from finish.lua on Redis's clock (next_attempt_at − updated_at), each
// failure recorded at once: no wall-clock wait. With 5 attempts, the old
// default, the last attempt came 15 s after the first, and a 15–30 s
// restart dead-lettered every request it met.
func TestDefaultRetriesOutliveOutage(t *testing.T) {
	q, c := jobsQueue(t) // the defaults
	ctx := context.Background()
	r := httptest.NewRequest("POST", "/job", strings.NewReader("job"))
	id, err := q.Enqueue(ctx, "jobs", []string{"k"}, r, r.Header, []byte("job"))
	if err != nil {
		t.Fatal(err)
	}
	w := newWorker(q, q.Rule("jobs"), q.o.Consumer)
	if err := c.Do(ctx, c.B().XgroupCreate().Key(w.base+"q").Group(group).Id("0").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	es, err := c.Do(ctx, c.B().Xreadgroup().Group(group, q.o.Consumer).Count(1).Streams().Key(w.base+"q").Id(">").Build()).AsXRead()
	if err != nil || len(es[w.base+"q"]) != 1 {
		t.Fatalf("XREADGROUP = %v, %v; want the request", es, err)
	}
	e := &entry{sid: es[w.base+"q"][0].ID, id: id, key: "k"}
	var waits []time.Duration
	var survived time.Duration
	for attempt := 1; ; attempt++ {
		state, err := w.record(ctx, e, &outcome{state: "failed", err: "dial tcp: connection refused", send: randHex(8)})
		if err != nil {
			t.Fatalf("attempt %d: record: %v", attempt, err)
		}
		if state == "dead_lettered" {
			if attempt != DefaultMaxAttempts {
				t.Errorf("dead-lettered at attempt %d, want %d (DefaultMaxAttempts)", attempt, DefaultMaxAttempts)
			}
			break
		}
		if attempt > 100 {
			t.Fatalf("never dead-lettered: %s", state)
		}
		st, err := q.Status(ctx, id)
		if err != nil || st.State != "failed" || st.Attempts != attempt {
			t.Fatalf("attempt %d: %+v, %v; want failed", attempt, st, err)
		}
		updated, err1 := time.Parse(time.RFC3339Nano, st.Updated)
		next, err2 := time.Parse(time.RFC3339Nano, st.NextAttempt)
		if err1 != nil || err2 != nil {
			t.Fatalf("updated_at %q, next_attempt_at %q: %v, %v", st.Updated, st.NextAttempt, err1, err2)
		}
		wait := next.Sub(updated)
		if n, _ := strconv.ParseInt(strings.TrimPrefix(state, "failed:"), 10, 64); time.Duration(n)*time.Millisecond != wait {
			t.Errorf("attempt %d: finish.lua answered %s, the record says %v", attempt, state, wait)
		}
		waits = append(waits, wait)
		survived += wait
	}
	if survived < 2*time.Minute || survived != 243*time.Second {
		t.Errorf("with the defaults the last attempt comes %v after the first failed one (waits %v); want 243 s (at least 2 min: an upstream restart must not dead-letter)", survived, waits)
	}
}
