package deferq_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Requests queued by an earlier version (no stream-id index entry, no
// key's list named in their record), held by an instance of that version
// and never tried by one of this: two instances of this version, started
// at once, index them and name their lists without their turn, scanning
// the stream once for both; so when their holder is gone and they are
// trimmed away, a claim round cleans their records and their keys' lists,
// unasked, as for requests this version queued (GET /v1/deferred/ID then
// answers 404). Such a request's record read "queued" until someone asked,
// or for 7 days, and the last of a key stayed in its list for ever.
func TestOldRequestsIndexedAtStart(t *testing.T) {
	srv := redistest.StartServer(t)
	c := client(t, srv.Addr)
	ctx := context.Background()
	base := "sluice:defer:{" + deferq.Tag("jobs") + "}:"
	old := map[string]string{} // id -> its limiter key
	for i, key := range []string{"a", "b", "c"} {
		old[deferq.Tag("jobs")+"-0123456789abcdef012"+string(rune('0'+i))] = key
	}
	sids := map[string]string{} // id -> its entry
	for id, key := range old {
		sids[id] = writeRequest(t, c, base, id, key, false)
	}
	// An instance of the earlier version read them and holds them.
	if _, err := redistest.Do(srv.Addr, "XGROUP", "CREATE", base+"q", "sluice", "0"); err != nil {
		t.Fatal(err)
	}
	if _, err := redistest.Do(srv.Addr, "XREADGROUP", "GROUP", "sluice", "old", "COUNT", "10", "STREAMS", base+"q", ">"); err != nil {
		t.Fatal(err)
	}
	// Claim rounds every 5 s; nothing the old instance holds is idle for
	// the hour a claim needs until the test makes it so.
	var q *deferq.Queue
	for _, consumer := range []string{"new1", "new2"} {
		up := newUpstream(t, nil)
		var err error
		q, err = newQueue(deferq.Options{Client: c, Consumer: consumer, Upstream: mustURL(t, up.srv.URL), ClaimIdle: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		q.SetRules([]deferq.Rule{{Name: "jobs", Take: admitAll}})
		start(t, q)
	}
	waitFor(t, "the requests of the earlier version indexed, their lists named", time.Minute, func() bool {
		idx, err := c.Do(ctx, c.B().Hgetall().Key(base+"i").Build()).AsStrMap()
		if err != nil {
			return false
		}
		for id, key := range old {
			l, _ := c.Do(ctx, c.B().Hget().Key(base+"s:"+id).Field("list").Build()).ToString()
			h := sha256.Sum256([]byte(key))
			if idx[sids[id]] != id || l != hex.EncodeToString(h[:10]) {
				return false
			}
		}
		return true
	})
	if st, err := c.Do(ctx, c.B().Get().Key(base+"scan").Build()).ToString(); err != nil || st != "done" {
		t.Errorf("the scan's state after the whole stream was looked at: %q, %v; want done", st, err)
	}
	for id := range old {
		if st, err := q.Status(ctx, id); err != nil || st.State != "queued" || st.Attempts != 0 {
			t.Errorf("Status(%s), held by the old instance: %+v, %v; want queued, never tried", id, st, err)
		}
	}
	// The old instance is gone (its entries idle for 2 h), and they are
	// trimmed away, in one step so that no claim takes them between.
	for _, sid := range sids {
		if _, err := redistest.Do(srv.Addr, "EVAL", `redis.call('XCLAIM', KEYS[1], 'sluice', 'old', 0, ARGV[1], 'IDLE', 7200000, 'JUSTID')
redis.call('XDEL', KEYS[1], ARGV[1])`, "1", base+"q", sid); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "a claim round to clean what the trimmed requests left", time.Minute, func() bool {
		for id, key := range old {
			if exists(t, c, base+"s:"+id) != 0 || len(keyList(t, c, "jobs", key)) != 0 {
				return false
			}
		}
		return exists(t, c, base+"i") == 0
	})
	for id := range old {
		if _, err := q.Status(ctx, id); !errors.Is(err, deferq.ErrUnknownID) {
			t.Errorf("Status(%s) after its entry was trimmed: %v; want unknown", id, err)
		}
	}
}
