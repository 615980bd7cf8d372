package deferq_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// An enqueue whose script ran in Redis but whose reply was lost queued the
// request: it will be replayed. Enqueue used to answer it as a failure (the
// proxy then refused it 429, and the client, told to retry, sent it again:
// done twice). It finds out instead, and answers with the id it queued.
func TestEnqueueReplyLost(t *testing.T) {
	srv, x, _, q := cutQueue(t, "reply-lost-key", false)
	enqueue(t, q, "jobs", "warm", http.MethodPost, "/job", []byte("warm")) // loads the script
	x.Arm()
	r := httptest.NewRequest(http.MethodPost, "/job", bytes.NewReader([]byte("job")))
	id, err := q.Enqueue(context.Background(), "jobs", []string{"reply-lost-key"}, r, r.Header, []byte("job"))
	direct := client(t, srv.Addr)
	n, lerr := direct.Do(context.Background(), direct.B().Xlen().Key("sluice:defer:{"+deferq.Tag("jobs")+"}:q").Build()).AsInt64()
	if lerr != nil {
		t.Fatal(lerr)
	}
	if !x.Cut() {
		t.Fatal("the cutter never saw the enqueue: the test proves nothing")
	}
	if n != 2 {
		t.Fatalf("%d requests queued, want 2 (the warm-up and the one whose reply was lost, once)", n)
	}
	if err != nil {
		t.Fatalf("Enqueue whose reply was lost = %v; want its id: the request is queued and will be replayed", err)
	}
	st, err := newQueue(deferq.Options{Client: direct})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := st.Status(context.Background(), id); err != nil || s.State != "queued" {
		t.Errorf("Status(%s) = %+v, %v; want queued", id, s, err)
	}
}

// When Redis cannot be asked again either, the outcome stays unknown:
// Enqueue says so, with the id the request is queued under if it is, so
// that the answer can tell the client where to look rather than to send it
// again.
func TestEnqueueOutcomeUnknown(t *testing.T) {
	srv, x, _, q := cutQueue(t, "reply-lost-key", true)
	enqueue(t, q, "jobs", "warm", http.MethodPost, "/job", []byte("warm"))
	x.Arm()
	r := httptest.NewRequest(http.MethodPost, "/job", bytes.NewReader([]byte("job")))
	_, err := q.Enqueue(context.Background(), "jobs", []string{"reply-lost-key"}, r, r.Header, []byte("job"))
	var unknown *deferq.OutcomeUnknownError
	if !errors.As(err, &unknown) {
		t.Fatalf("Enqueue with its reply lost and Redis gone = %v; want an *OutcomeUnknownError", err)
	}
	direct := client(t, srv.Addr)
	st, err := newQueue(deferq.Options{Client: direct})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := st.Status(context.Background(), unknown.ID); err != nil || s.State != "queued" {
		t.Errorf("Status(%s) = %+v, %v; want queued (the script ran): the id must name the request", unknown.ID, s, err)
	}
}

// Redis refusing the connection is no doubt: nothing was sent, nothing
// queued. Enqueue says the store is unavailable (the proxy refuses the
// request as without defer), not that the outcome is unknown.
func TestEnqueueRedisDown(t *testing.T) {
	_, x, c, q := cutQueue(t, "never", false)
	x.Down()
	c.Do(context.Background(), c.B().Ping().Build()) // the client sees its connection gone
	r := httptest.NewRequest(http.MethodPost, "/job", bytes.NewReader([]byte("job")))
	_, err := q.Enqueue(context.Background(), "jobs", []string{"k"}, r, r.Header, []byte("job"))
	var unknown *deferq.OutcomeUnknownError
	if !errors.Is(err, sluice.ErrStoreUnavailable) || errors.As(err, &unknown) {
		t.Fatalf("Enqueue with Redis refusing connections = %v; want ErrStoreUnavailable, not an *OutcomeUnknownError", err)
	}
}

// cutQueue is a queue with the rule "jobs" on a fresh Redis, reached
// through a Cutter with marker and gone (redistest.NewCutter); c is its
// client, through the relay.
func cutQueue(t *testing.T, marker string, gone bool) (*redistest.Server, *redistest.Cutter, rueidis.Client, *deferq.Queue) {
	t.Helper()
	srv := redistest.StartServer(t)
	x := redistest.NewCutter(t, srv.Addr, marker, gone)
	c := x.Client(t)
	q, err := newQueue(deferq.Options{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs"}})
	return srv, x, c, q
}

// A Redis that takes the enqueue and never answers (stopped, not gone)
// must not hold the client for as long as it stays stopped: each of
// Enqueue's asks is bounded by EnqueueTimeout, and with both unanswered
// the outcome is unknown. Once Redis runs again, the two asks (same id)
// have queued the request at most once.
func TestEnqueueRedisStuck(t *testing.T) {
	srv := redistest.StartServer(t)
	// The client itself would wait for a stopped Redis far longer than
	// this test (its own connection timeout, 10s by default, is out of the
	// picture): what bounds Enqueue here is EnqueueTimeout alone.
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true,
		ForceSingleClient: true, ConnWriteTimeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	warmUp(t, c)
	q, err := newQueue(deferq.Options{Client: c, EnqueueTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs"}})
	if err := syscall.Kill(srv.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			syscall.Kill(srv.PID(), syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	done := make(chan error, 1)
	go func() {
		r := httptest.NewRequest(http.MethodPost, "/job", bytes.NewReader([]byte("job")))
		_, err := q.Enqueue(context.Background(), "jobs", []string{"k"}, r, r.Header, []byte("job"))
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(time.Minute): // a hang detector, far above the 2 × 200ms asked
		resume()
		t.Fatalf("Enqueue still waiting a minute into a stopped Redis (EnqueueTimeout 200ms)")
	}
	var unknown *deferq.OutcomeUnknownError
	if !errors.As(err, &unknown) {
		t.Fatalf("Enqueue into a stopped Redis = %v; want an *OutcomeUnknownError", err)
	}
	resume()
	if err := c.Do(context.Background(), c.B().Ping().Build()).Error(); err != nil { // after the asks, on their connection
		t.Fatal(err)
	}
	n, err := c.Do(context.Background(), c.B().Xlen().Key("sluice:defer:{"+deferq.Tag("jobs")+"}:q").Build()).AsInt64()
	// Queued at most once: twice asked under one id. (Once, or not at all
	// when neither ask left the client before its deadline, which a
	// loaded machine can make happen.)
	if err != nil || n < 1 || n > 2 {
		t.Fatalf("XLEN = %d, %v; want 1 or 2 (the warm-up, and the stuck request at most once)", n, err)
	}
}

// warmUp enqueues one request to the rule "jobs" through c, which loads
// the script into Redis and opens c's connection, on a queue whose
// EnqueueTimeout is a hang detector: the tests' own queue, on the same
// client, asks for 200ms, which a loaded machine can take to connect and
// load the script. (The warm-up ran on the test's queue and failed the
// test when it did.)
func warmUp(t *testing.T, c rueidis.Client) {
	t.Helper()
	q, err := newQueue(deferq.Options{Client: c, EnqueueTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs"}})
	enqueue(t, q, "jobs", "warm", http.MethodPost, "/job", []byte("warm"))
}

// A 404 from GET /v1/deferred/ID is final. The client answered 503
// defer_outcome_unknown is told to look at its id, and that a 404 means
// the request was not queued, so that it sends it again; an enqueue of
// that id still on its way to Redis (both asks held up on a stuck path)
// must then not queue it when it lands, or the request is done twice. It
// used to: the status read missed the record, answered 404, and the late
// ask queued the request after it.
func TestEnqueueLateAfterNotFound(t *testing.T) {
	srv := redistest.StartServer(t)
	x := redistest.NewHolder(t, srv.Addr, "late-key")
	c := x.Client(t)
	warmUp(t, c)
	q, err := newQueue(deferq.Options{Client: c, EnqueueTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs"}})
	x.Hold()
	r := httptest.NewRequest(http.MethodPost, "/job", bytes.NewReader([]byte("job")))
	_, err = q.Enqueue(context.Background(), "jobs", []string{"late-key"}, r, r.Header, []byte("job"))
	var unknown *deferq.OutcomeUnknownError
	if !errors.As(err, &unknown) {
		x.Release()
		t.Fatalf("Enqueue with both asks held = %v; want an *OutcomeUnknownError", err)
	}
	// The client looks where the 503 pointed, through another connection
	// (or another instance) that Redis answers at once.
	direct := client(t, srv.Addr)
	st, err := newQueue(deferq.Options{Client: direct})
	if err != nil {
		t.Fatal(err)
	}
	poll := func() int {
		w := httptest.NewRecorder()
		st.ServeHTTP(w, httptest.NewRequest(http.MethodGet, deferq.StatusPath+unknown.ID, nil))
		return w.Code
	}
	if code := poll(); code != http.StatusNotFound {
		x.Release()
		t.Fatalf("GET %s%s with the enqueue held = %d; want 404 (nothing has reached Redis)", deferq.StatusPath, unknown.ID, code)
	}
	if n := x.Release(); n == 0 {
		t.Fatal("the holder held no enqueue: the test proves nothing")
	}
	n, err := direct.Do(context.Background(), direct.B().Xlen().Key("sluice:defer:{"+deferq.Tag("jobs")+"}:q").Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	code := poll()
	if n != 1 || code != http.StatusNotFound {
		t.Errorf("after a 404 for %s and its held enqueue landing: XLEN = %d, GET = %d; want 1 (the warm-up only) and 404 still: "+
			"the client told 404 sends it again", unknown.ID, n, code)
	}
}
