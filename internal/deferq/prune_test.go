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
// entry is claimed and settled; the running instance stays.
func TestPruneGoneConsumers(t *testing.T) {
	srv := redistest.StartServer(t)
	up := newUpstream(t, nil)
	c := client(t, srv.Addr)
	open := func(context.Context, []string) (sluice.Decision, error) { return sluice.Decision{Allowed: true}, nil }
	rules := []deferq.Rule{{Name: "p", Take: open}}
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

	// "gone" delivers one request, then stops: a consumer holding nothing.
	gone, err := deferq.New(deferq.Options{Client: c, Upstream: mustURL(t, up.srv.URL), Consumer: "gone", ClaimIdle: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	gone.SetRules(rules)
	enqueue(t, gone, "p", "k1", http.MethodPost, "/one", []byte("1"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { gone.Run(ctx); close(done) }()
	waitFor(t, "the first delivery", 30*time.Second, func() bool { got, _ := up.snapshot(); return len(got) == 1 })
	cancel()
	<-done
	// "holder" reads a request by hand and never settles it.
	held := enqueue(t, gone, "p", "k2", http.MethodPost, "/two", []byte("2"))
	if err := c.Do(context.Background(), c.B().Xreadgroup().Group("sluice", "holder").Count(1).Streams().Key(stream).Id(">").Build()).Error(); err != nil && !rueidis.IsRedisNil(err) {
		t.Fatal(err)
	}
	if m := consumers(); m["gone"] != 0 || m["holder"] != 1 {
		t.Fatalf("consumers %v, want gone holding 0 and holder 1", m)
	}

	// "live" runs with a short ClaimIdle: gone goes after 4 s idle; holder
	// stays until live claims its entry (idle 2 s) and delivers it, then
	// goes too. Its delivery timeout, under ClaimIdle/2, is what a short
	// ClaimIdle costs: a send answered later is cut off and sent again
	// (the queue's documented retry), which counts twice below; at 400 ms
	// (ClaimIdle 1 s) an answer 600 ms late on a loaded machine did.
	live, err := deferq.New(deferq.Options{Client: c, Upstream: mustURL(t, up.srv.URL), Consumer: "live", ClaimIdle: 2 * time.Second, DeliveryTimeout: 900 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	live.SetRules(rules)
	start(t, live)
	waitFor(t, "the held request delivered by live", 30*time.Second, func() bool {
		st, err := live.Status(context.Background(), held)
		return err == nil && st.State == "delivered"
	})
	waitFor(t, "gone and holder pruned", 30*time.Second, func() bool {
		m := consumers()
		_, g := m["gone"]
		_, h := m["holder"]
		return !g && !h
	})
	if m := consumers(); len(m) != 1 || m["live"] != 0 {
		t.Errorf("consumers %v, want live alone", m)
	}
	got, byKey := up.snapshot()
	for _, d := range got {
		if byKey[d.idem] != 1 {
			t.Errorf("%s delivered %d times", d.path, byKey[d.idem])
		}
	}
}
