package deferq_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
)

// upstream records what reaches it.
type upstream struct {
	mu       sync.Mutex
	got      []delivery
	byKey    map[string]int // Idempotency-Key → arrivals
	status   func(d delivery, n int) int
	arrivals chan delivery
	srv      *httptest.Server
}

type delivery struct {
	method, path, query, key, idem string
	header                         http.Header
	body                           []byte
}

func newUpstream(t *testing.T, status func(d delivery, n int) int) *upstream {
	u := &upstream{byKey: map[string]int{}, status: status, arrivals: make(chan delivery, 1000)}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		d := delivery{method: r.Method, path: r.URL.Path, query: r.URL.RawQuery, key: r.Header.Get("X-Key"),
			idem: r.Header.Get("Idempotency-Key"), header: r.Header.Clone(), body: body}
		u.mu.Lock()
		u.byKey[d.idem]++
		n := u.byKey[d.idem]
		u.got = append(u.got, d)
		u.mu.Unlock()
		code := http.StatusOK
		if u.status != nil {
			code = u.status(d, n)
		}
		w.WriteHeader(code)
		u.arrivals <- d
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) snapshot() ([]delivery, map[string]int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	m := make(map[string]int, len(u.byKey))
	for k, v := range u.byKey {
		m[k] = v
	}
	return append([]delivery(nil), u.got...), m
}

func client(t testing.TB, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatalf("rueidis: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// clusterClient is a client of a Redis Cluster of its own.
func clusterClient(t testing.TB) rueidis.Client {
	t.Helper()
	cl := redistest.StartCluster(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: cl.Addrs, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// jobsQueueOn is a queue over c of one rule, "jobs", whose replays take
// their turn with take (nil: without asking a limit), delivering to an
// upstream of its own; not running yet (start). Its other options are the
// defaults, as survivorOptions'.
func jobsQueueOn(t *testing.T, c rueidis.Client, take func(context.Context, []string) (sluice.Decision, error)) (*deferq.Queue, *upstream) {
	t.Helper()
	up := newUpstream(t, nil)
	q, err := newQueue(deferq.Options{Client: c, Upstream: mustURL(t, up.srv.URL)})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs", Take: take}})
	return q, up
}

func mustURL(t testing.TB, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// newQueue is deferq.New with an EnqueueTimeout of a minute unless o sets
// one: the default, 2 s per ask, is a deadline a loaded machine can miss
// (an enqueue failed so, "outcome unknown", beside CPU hogs), and the
// tests about it set their own.
func newQueue(o deferq.Options) (*deferq.Queue, error) {
	if o.EnqueueTimeout == 0 {
		o.EnqueueTimeout = time.Minute
	}
	return deferq.New(o)
}

// start runs q until the test ends.
func start(t testing.TB, q *deferq.Queue) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func enqueue(t testing.TB, q *deferq.Queue, rule, key, method, target string, body []byte) string {
	t.Helper()
	r := httptest.NewRequest(method, target, bytes.NewReader(body))
	r.Header.Set("X-Key", key)
	r.Header.Set("Content-Type", "application/octet-stream")
	id, err := q.Enqueue(context.Background(), rule, []string{key}, r, r.Header, body)
	if err != nil {
		t.Fatalf("Enqueue(%s %s): %v", method, target, err)
	}
	return id
}

// waitFor polls cond (a condition, not a duration) until it holds or the
// bound passes.
func waitFor(t testing.TB, what string, bound time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", bound, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// awaitState waits until q's Status of id reads one of states (a
// condition; a minute is its bound, not a wait) and returns it; a failure
// names the last Status read.
func awaitState(t testing.TB, q *deferq.Queue, id string, states ...string) deferq.Status {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := q.Status(context.Background(), id)
		if err == nil && slices.Contains(states, st.State) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after a minute waiting for %s to be %s: Status = %+v, %v", id, strings.Join(states, " or "), st, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// clock is a manual clock for the replay limit.
type clock struct{ ns atomic.Int64 }

func (c *clock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }
func newClock() *clock               { c := &clock{}; c.ns.Store(time.Unix(1_700_000_000, 0).UnixNano()); return c }
func limitTake(st sluice.Store, l sluice.Limit, c *clock, denied *atomic.Int64) func(context.Context, []string) (sluice.Decision, error) {
	return func(ctx context.Context, keys []string) (sluice.Decision, error) {
		rs := make([]sluice.Request, len(keys))
		for i, k := range keys {
			rs[i] = sluice.Request{Key: k, Algorithm: sluice.FixedWindow, Limit: l, Cost: 1, Now: c.now()}
		}
		ds := make([]sluice.Decision, len(keys))
		err := st.TakeAll(ctx, rs, ds) // all or none
		d := ds[0]
		for _, x := range ds {
			if !x.Allowed && (d.Allowed || x.RetryAfter > d.RetryAfter) {
				d = x
			}
		}
		if err == nil && !d.Allowed && denied != nil {
			denied.Add(1)
		}
		return d, err
	}
}

// Replay goes at the rule's rate (3 per period of the replay clock: 3
// deliveries, then the limit holds the rest until the clock moves), in
// order per key, with method, path, query, headers and binary bodies
// intact, and Idempotency-Key set to the id.
func TestReplayRateOrderBodies(t *testing.T) {
	srv := redistest.StartServer(t)
	up := newUpstream(t, nil)
	clk := newClock()
	var denied atomic.Int64
	q, err := newQueue(deferq.Options{Client: client(t, srv.Addr), Upstream: mustURL(t, up.srv.URL+"/base")})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "orders", Take: limitTake(memstore.New(memstore.Options{}), sluice.PerSecond(3), clk, &denied)}})
	var ids []string
	var sums [][32]byte
	for i := range 9 {
		body := make([]byte, 1000+i)
		for j := range body {
			body[j] = byte(i*7 + j) // every byte value, zeros included
		}
		sums = append(sums, sha256.Sum256(body))
		ids = append(ids, enqueue(t, q, "orders", "k1", http.MethodPost, "/orders/"+strconv.Itoa(i)+"?x=1&y=%2F", body))
	}
	start(t, q)
	for step := 1; step <= 3; step++ {
		waitFor(t, fmt.Sprintf("%d deliveries and a denial", 3*step), 30*time.Second, func() bool {
			got, _ := up.snapshot()
			// After the last step nothing is left to be denied.
			return len(got) >= 3*step && (step == 3 || denied.Load() >= int64(step))
		})
		if got, _ := up.snapshot(); len(got) != 3*step {
			t.Fatalf("step %d: %d deliveries, want %d (the limit is 3 per period)", step, len(got), 3*step)
		}
		clk.add(time.Second)
	}
	got, byKey := up.snapshot()
	for i, d := range got {
		if d.method != http.MethodPost || d.path != "/base/orders/"+strconv.Itoa(i) || d.query != "x=1&y=%2F" {
			t.Errorf("delivery %d: %s %s?%s, want POST /base/orders/%d?x=1&y=%%2F (in order)", i, d.method, d.path, d.query, i)
		}
		if sha256.Sum256(d.body) != sums[i] {
			t.Errorf("delivery %d: body of %d bytes differs from the one queued", i, len(d.body))
		}
		if d.idem != ids[i] || d.header.Get("Sluice-Deferred-Id") != ids[i] || d.header.Get("Content-Type") != "application/octet-stream" {
			t.Errorf("delivery %d: headers %v, want Idempotency-Key and Sluice-Deferred-Id %s", i, d.header, ids[i])
		}
		if byKey[d.idem] != 1 {
			t.Errorf("delivery %d: %d arrivals", i, byKey[d.idem])
		}
	}
	for _, id := range ids {
		if st := awaitState(t, q, id, "delivered"); st.Status != 200 || st.Attempts != 1 || st.Rule != "orders" {
			t.Errorf("Status(%s) = %+v, want status 200 after 1 attempt, rule orders", id, st)
		}
	}
	if n, _, err := q.Depth(context.Background(), "orders"); err != nil || n != 0 {
		t.Errorf("Depth = %d, %v; want an empty queue", n, err)
	}
}

// Retries with back-off on 503, then delivered; always 500: dead-lettered
// after MaxAttempts; a 400 is the upstream's final answer.
func TestRetriesAndDeadLetters(t *testing.T) {
	srv := redistest.StartServer(t)
	up := newUpstream(t, func(d delivery, n int) int {
		switch d.key {
		case "flaky":
			if n <= 2 {
				return http.StatusServiceUnavailable
			}
			return http.StatusCreated
		case "broken":
			return http.StatusInternalServerError
		}
		return http.StatusBadRequest
	})
	c := client(t, srv.Addr)
	q, err := newQueue(deferq.Options{Client: c, Upstream: mustURL(t, up.srv.URL), MaxAttempts: 3, Backoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "hooks"}})
	flaky := enqueue(t, q, "hooks", "flaky", http.MethodPut, "/a", []byte("a"))
	broken := enqueue(t, q, "hooks", "broken", http.MethodPost, "/b", []byte("b"))
	bad := enqueue(t, q, "hooks", "bad", http.MethodPost, "/c", nil)
	start(t, q)
	want := map[string]deferq.Status{
		flaky:  {State: "delivered", Status: 201, Attempts: 3},
		broken: {State: "dead_lettered", Status: 500, Attempts: 3},
		bad:    {State: "delivered", Status: 400, Attempts: 1},
	}
	for id, w := range want {
		st := awaitState(t, q, id, "delivered", "dead_lettered")
		if st.State != w.State || st.Status != w.Status || st.Attempts != w.Attempts {
			t.Errorf("Status(%s) = %+v, want %+v", id, st, w)
		}
	}
	_, byKey := up.snapshot()
	if byKey[broken] != 3 || byKey[flaky] != 3 || byKey[bad] != 1 {
		t.Errorf("arrivals: broken %d flaky %d bad %d; want 3, 3, 1", byKey[broken], byKey[flaky], byKey[bad])
	}
	dead, err := c.Do(context.Background(), c.B().Xrange().Key("sluice:defer:{"+deferq.Tag("hooks")+"}:dead").Start("-").End("+").Build()).AsXRange()
	if err != nil || len(dead) != 1 || dead[0].FieldValues["id"] != broken || dead[0].FieldValues["body"] != "b" || dead[0].FieldValues["status"] != "500" {
		t.Errorf("dead-letter stream = %+v, %v; want the broken request with its body and status", dead, err)
	}
}

// Bad input gets a clear answer: a body over the cap, a full queue, an
// unknown id, a malformed id.
func TestBadInput(t *testing.T) {
	srv := redistest.StartServer(t)
	q, err := newQueue(deferq.Options{Client: client(t, srv.Addr), Upstream: mustURL(t, "http://127.0.0.1:1")})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "small", MaxBodyBytes: 10, MaxQueue: 2}})
	rule := q.Rule("small")
	for _, tc := range []struct {
		body   string
		length int64
	}{{"12345678901", 11}, {"12345678901", -1}} {
		r := httptest.NewRequest("POST", "/x", strings.NewReader(tc.body))
		r.ContentLength = tc.length
		if _, _, err := q.ReadBody(r, rule); !errors.Is(err, deferq.ErrBodyTooLarge) || !strings.Contains(err.Error(), "10 bytes") {
			t.Errorf("ReadBody(11 bytes, length %d) = %v, want ErrBodyTooLarge naming the cap", tc.length, err)
		}
	}
	if b, _, err := q.ReadBody(httptest.NewRequest("POST", "/x", strings.NewReader("0123456789")), rule); err != nil || string(b) != "0123456789" {
		t.Errorf("ReadBody(10 bytes) = %q, %v", b, err)
	}
	enqueue(t, q, "small", "k", "GET", "/", nil)
	enqueue(t, q, "small", "k", "GET", "/", nil)
	r := httptest.NewRequest("GET", "/", nil)
	if _, err := q.Enqueue(context.Background(), "small", []string{"k"}, r, r.Header, nil); !errors.Is(err, deferq.ErrQueueFull) {
		t.Errorf("third Enqueue = %v, want ErrQueueFull", err)
	}
	if _, err := q.Enqueue(context.Background(), "nope", []string{"k"}, r, r.Header, nil); !errors.Is(err, deferq.ErrUnknownRule) {
		t.Errorf("Enqueue(unknown rule) = %v, want ErrUnknownRule", err)
	}
	for _, tc := range []struct {
		id   string
		code int
		msg  string
	}{
		{deferq.Tag("small") + "-00000000000000000000", 404, "unknown deferred id"},
		{"nope", 400, "malformed deferred id"},
		{strings.Repeat("z", 5000), 400, "malformed deferred id"},
	} {
		w := httptest.NewRecorder()
		q.ServeHTTP(w, httptest.NewRequest("GET", deferq.StatusPath+tc.id, nil))
		var body map[string]string
		json.Unmarshal(w.Body.Bytes(), &body)
		if w.Code != tc.code || !strings.Contains(body["error"], tc.msg) || len(body["error"]) > 300 {
			t.Errorf("GET %.40s: %d %q, want %d with %q", tc.id, w.Code, w.Body.String(), tc.code, tc.msg)
		}
	}
	// WriteAccepted and a known id.
	w := httptest.NewRecorder()
	id := "0123456789ab-0123456789abcdef0123"
	deferq.WriteAccepted(w, id)
	if w.Code != 202 || w.Header().Values("Location") != nil || !strings.Contains(w.Body.String(), `"deferred_id":"`+id+`"`) {
		t.Errorf("WriteAccepted: %d %v %s", w.Code, w.Header(), w.Body)
	}
}

func TestMain(m *testing.M) {
	if os.Getenv("DEFERQ_CHILD") != "" {
		child()
		return
	}
	os.Exit(m.Run())
}
