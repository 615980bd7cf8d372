package deferq_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// child is the other instance: this test binary re-executed, running one
// Queue whose rule "jobs" either denies every replay (DEFERQ_MODE=deny: it
// holds what it reads) or allows it, until it is killed.
func child() {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{os.Getenv("DEFERQ_REDIS")}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	u, _ := url.Parse(os.Getenv("DEFERQ_UPSTREAM"))
	// Its sends are not cut off (10 min): one cut off while the test waited
	// to kill it (4 s, once) was sent again, a third arrival. The survivor
	// takes its requests over by ageHeld, whatever the claim idle.
	q, err := newQueue(deferq.Options{Client: c, Upstream: u, Consumer: "victim", ClaimIdle: time.Hour, DeliveryTimeout: 10 * time.Minute, Concurrency: 1})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	deny := os.Getenv("DEFERQ_MODE") == "deny"
	q.SetRules([]deferq.Rule{{Name: "jobs", Take: func(context.Context, []string) (sluice.Decision, error) {
		if deny {
			return sluice.Decision{RetryAfter: time.Hour}, nil
		}
		return sluice.Decision{Allowed: true}, nil
	}}})
	q.Run(context.Background())
}

func startChild(t *testing.T, redisAddr, upstreamURL, mode string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DEFERQ_CHILD=1", "DEFERQ_REDIS="+redisAddr, "DEFERQ_UPSTREAM="+upstreamURL, "DEFERQ_MODE="+mode)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// pendingWith returns how many entries of rule's stream are pending with
// consumer.
func pendingWith(t testing.TB, c rueidis.Client, rule, consumer string) int64 {
	arr, err := c.Do(context.Background(), c.B().Xpending().Key("sluice:defer:{"+deferq.Tag(rule)+"}:q").Group("sluice").Build()).ToArray()
	if err != nil || len(arr) < 4 {
		return 0
	}
	per, _ := arr[3].ToArray()
	for _, p := range per {
		kv, _ := p.ToArray()
		if len(kv) == 2 {
			name, _ := kv[0].ToString()
			n, _ := kv[1].ToString()
			if name == consumer {
				v, _ := strconv.ParseInt(n, 10, 64)
				return v
			}
		}
	}
	return 0
}

// survivorOptions are those of the instance that takes over a killed one's
// requests: the default claim idle and delivery timeout (30 s, 10 s), so
// that a send a loaded machine answers late is not cut off and sent again.
// Such a retry is the queue's documented behaviour (an attempt without an
// answer within DeliveryTimeout is retried with the same Idempotency-Key),
// but it counts twice at the upstream, and these tests count the sends of
// a takeover. With a 400 ms timeout, one answer 600 ms late failed them.
// The killed instance's entries are aged (ageHeld) rather than waited for.
func survivorOptions(c rueidis.Client, upstream string) deferq.Options {
	u, _ := url.Parse(upstream)
	return deferq.Options{Client: c, Upstream: u}
}

// ageHeld makes the entries of rule pending with consumer, a killed
// instance, idle for an hour, as if it had died an hour ago: the next
// claim round of a live instance takes them, whatever its claim idle.
func ageHeld(t *testing.T, c rueidis.Client, rule, consumer string) {
	t.Helper()
	ctx := context.Background()
	stream := "sluice:defer:{" + deferq.Tag(rule) + "}:q"
	ps, err := c.Do(ctx, c.B().Xpending().Key(stream).Group("sluice").Start("-").End("+").Count(10_000).Consumer(consumer).Build()).ToArray()
	if err != nil {
		t.Fatalf("XPENDING %s: %v", consumer, err)
	}
	for _, p := range ps {
		e, _ := p.ToArray()
		if len(e) == 0 {
			continue
		}
		id, _ := e[0].ToString()
		if err := c.Do(ctx, c.B().Xclaim().Key(stream).Group("sluice").Consumer(consumer).MinIdleTime("0").Id(id).Idle(time.Hour.Milliseconds()).Justid().Build()).Error(); err != nil {
			t.Fatalf("XCLAIM %s IDLE: %v", id, err)
		}
	}
}

// An instance reads queued requests and is SIGKILLed while holding them:
// another instance claims them once idle and delivers each exactly once.
func TestKilledInstanceHolding(t *testing.T) {
	srv := redistest.StartServer(t)
	c := client(t, srv.Addr)
	q, up := jobsQueueOn(t, c, nil)
	const n = 20
	ids := map[string]bool{}
	for i := range n {
		ids[enqueue(t, q, "jobs", "k"+strconv.Itoa(i%3), "POST", "/job/"+strconv.Itoa(i), []byte("job "+strconv.Itoa(i)))] = true
	}
	victim := startChild(t, srv.Addr, up.srv.URL, "deny")
	waitFor(t, "the victim to hold every request", 30*time.Second, func() bool { return pendingWith(t, c, "jobs", "victim") == n })
	if err := victim.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	victim.Wait()
	ageHeld(t, c, "jobs", "victim")
	start(t, q) // the survivor
	waitFor(t, "every request delivered", time.Minute, func() bool {
		got, _ := up.snapshot()
		return len(got) >= n
	})
	for id := range ids {
		awaitState(t, q, id, "delivered")
	}
	got, byKey := up.snapshot()
	if len(got) != n || len(byKey) != n {
		t.Fatalf("upstream saw %d arrivals of %d ids, want %d each once", len(got), len(byKey), n)
	}
	for id := range ids {
		if byKey[id] != 1 {
			t.Errorf("%s arrived %d times", id, byKey[id])
		}
	}
}

// An instance is SIGKILLed while its request is at the upstream, before it
// could record the outcome: the survivor sends that request again with the
// same Idempotency-Key (the one case an idempotent upstream must absorb),
// and every other request exactly once.
func TestKilledInstanceInFlight(t *testing.T) {
	srv := redistest.StartServer(t)
	hold := make(chan struct{})
	first := make(chan string, 1)
	up := newUpstream(t, func(d delivery, n int) int {
		select {
		case first <- d.idem: // the victim's first send: hold it until the victim is dead
			<-hold
		default:
		}
		return http.StatusOK
	})
	c := client(t, srv.Addr)
	q, err := newQueue(survivorOptions(c, up.srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs"}})
	const n = 10
	for i := range n {
		enqueue(t, q, "jobs", "k", "POST", "/job/"+strconv.Itoa(i), []byte(strconv.Itoa(i)))
	}
	victim := startChild(t, srv.Addr, up.srv.URL, "allow")
	inflight := <-first
	victim.Process.Kill()
	victim.Wait()
	close(hold)
	ageHeld(t, c, "jobs", "victim")
	start(t, q)
	waitFor(t, "every id delivered", time.Minute, func() bool {
		_, byKey := up.snapshot()
		return len(byKey) == n && len(q.Rule("jobs").Name) > 0 && depth(q) == 0
	})
	got, byKey := up.snapshot()
	for id, k := range byKey {
		want := 1
		if id == inflight {
			want = 2
		}
		if k != want {
			t.Errorf("%s arrived %d times, want %d", id, k, want)
		}
	}
	if len(got) != n+1 {
		t.Errorf("%d arrivals, want %d (each once, the one in flight at the kill twice)", len(got), n+1)
	}
	// Order per key held: the bodies arrive 0..n-1 (the repeat aside).
	next := 0
	for _, d := range got {
		if string(d.body) == strconv.Itoa(next) {
			next++
		}
	}
	if next != n {
		t.Errorf("bodies out of order: %d of %d in sequence", next, n)
	}
}

func depth(q *deferq.Queue) int64 {
	n, _, _ := q.Depth(context.Background(), "jobs")
	return n
}
