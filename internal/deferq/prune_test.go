package deferq_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Each process is a consumer of its own, so restarts used to leave one
// consumer each in the group, for ever. A consumer left by a stopped
// instance, holding nothing, is deleted once idle for two ClaimIdle; one
// that holds an entry stays (deleting it would drop the entry), until the
// entry is claimed; the running instance stays.
//
// The instance that prunes, live, has a short ClaimIdle (2 s, so that the
// test waits seconds, not minutes), and so a delivery timeout under 1 s,
// which a loaded machine can miss: a send cut off is sent again, and
// counted twice below. So live sends nothing: it holds one request its
// limit refuses, and its bound (1 byte) lets it read or claim no other.
// The deliveries are made by instances with an hour's ClaimIdle, whose
// sends have minutes; the held request is aged by hand (ageHeld) for one
// of them to claim.
func TestPruneGoneConsumers(t *testing.T) {
	srv := redistest.StartServer(t)
	up := newUpstream(t, nil)
	c := client(t, srv.Addr)
	open := func(context.Context, []string) (sluice.Decision, error) { return sluice.Decision{Allowed: true}, nil }
	shut := func(context.Context, []string) (sluice.Decision, error) {
		return sluice.Decision{RetryAfter: 50 * time.Millisecond}, nil
	}
	stream := deferq.DefaultPrefix + "{" + deferq.Tag("p") + "}:q"
	consumers := func() map[string]int64 {
		arr, err := c.Do(context.Background(), c.B().XinfoConsumers().Key(stream).Group("sluice").Build()).ToArray()
		if err != nil {
			t.Fatalf("XINFO CONSUMERS: %v", err)
		}
		m := map[string]int64{}
		for _, v := range arr {
			f, _ := v.AsMap()
			name, pending := f["name"], f["pending"]
			n, _ := name.ToString()
			p, _ := pending.AsInt64()
			m[n] = p
		}
		return m
	}
	// slow is an instance whose sends have minutes: its deliveries do not
	// depend on how loaded the machine is.
	slow := func(name string) *deferq.Queue {
		q, err := newQueue(deferq.Options{Client: c, Upstream: mustURL(t, up.srv.URL), Consumer: name,
			ClaimIdle: time.Hour, DeliveryTimeout: 10 * time.Minute, EnqueueTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		q.SetRules([]deferq.Rule{{Name: "p", Take: open}})
		return q
	}
	gone, after := slow("gone"), slow("after")

	// live reads one request, which its limit never lets go: holding it,
	// it has no room for more.
	enqueue(t, gone, "p", "k0", http.MethodPost, "/zero", []byte("0"))
	live, err := newQueue(deferq.Options{Client: c, Upstream: mustURL(t, up.srv.URL), Consumer: "live",
		ClaimIdle: 2 * time.Second, DeliveryTimeout: 900 * time.Millisecond, MaxHeldBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	live.SetRules([]deferq.Rule{{Name: "p", Take: shut}})
	runUntil(t, live)
	waitFor(t, "live to hold /zero", time.Minute, func() bool { return pendingWith(t, c, "p", "live") == 1 })

	// "holder" reads a request by hand and never settles it; then "gone"
	// delivers one request and stops: a consumer holding nothing, idle
	// for less time than holder.
	held := enqueue(t, gone, "p", "k2", http.MethodPost, "/two", []byte("2"))
	if err := c.Do(context.Background(), c.B().Xreadgroup().Group("sluice", "holder").Count(1).Streams().Key(stream).Id(">").Build()).Error(); err != nil && !rueidis.IsRedisNil(err) {
		t.Fatal(err)
	}
	enqueue(t, gone, "p", "k1", http.MethodPost, "/one", []byte("1"))
	stopGone := runUntil(t, gone)
	waitFor(t, "the first delivery", time.Minute, func() bool { got, _ := up.snapshot(); return len(got) == 1 })
	stopGone()
	if m := consumers(); m["gone"] != 0 || m["holder"] != 1 || m["live"] != 1 {
		t.Fatalf("consumers %v, want gone holding 0, holder 1 and live 1", m)
	}

	// gone goes once idle 4 s; holder, idle longer, stays: it holds /two.
	waitFor(t, "gone pruned", time.Minute, func() bool { _, g := consumers()["gone"]; return !g })
	if m := consumers(); len(m) != 2 || m["holder"] != 1 || m["live"] != 1 {
		t.Fatalf("consumers %v once gone was pruned, want holder holding 1 and live 1", m)
	}

	// after takes /two over from holder (aged as if it had died an hour
	// ago) and delivers it; then holder, holding nothing, goes, and so
	// does after once stopped.
	ageHeld(t, c, "p", "holder")
	stopAfter := runUntil(t, after)
	awaitState(t, after, held, "delivered")
	stopAfter()
	waitFor(t, "holder and after pruned", time.Minute, func() bool {
		m := consumers()
		_, h := m["holder"]
		_, a := m["after"]
		return !h && !a
	})
	if m := consumers(); len(m) != 1 || m["live"] != 1 {
		t.Errorf("consumers %v, want live alone, holding /zero", m)
	}
	got, byKey := up.snapshot()
	if len(got) != 2 {
		t.Errorf("upstream saw %d requests, want 2 (/one, /two; /zero refused)", len(got))
	}
	for _, d := range got {
		if byKey[d.idem] != 1 {
			t.Errorf("%s delivered %d times", d.path, byKey[d.idem])
		}
	}
}
