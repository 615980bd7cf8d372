package proxy_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/memstore"
)

// goneAtCharge is memstore with a hook: the first TakeAll of exactly two
// requests after arm (AdmitOrDefer charging the other rules of a request
// the defer rule refused) is made, then reported on charging, and
// answered once the request's context has ended (its client gone).
type goneAtCharge struct {
	*memstore.Store
	armed    atomic.Bool
	charging chan struct{}
}

func (s *goneAtCharge) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	err := s.Store.TakeAll(ctx, rs, ds)
	if len(rs) == 2 && s.armed.CompareAndSwap(true, false) {
		close(s.charging)
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second): // fails below: the client's leaving was never seen
		}
	}
	return err
}

// TestDeferGoneAfterChargeGivesBack: a request the defer rule would queue
// is charged by its other enforcing rules first; a client that leaves
// just then (on a delay rule's watched connection) is not queued, and
// those charges are given back as for any request not queued: the
// per-IP count is as before it. Kept, the client lost its allowance to a
// request nobody served.
func TestDeferGoneAfterChargeGivesBack(t *testing.T) {
	srv := redistest.StartServer(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	q, err := deferq.New(deferq.Options{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs"}})
	st := &goneAtCharge{Store: memstore.New(memstore.Options{}), charging: make(chan struct{})}
	f := start(t, setup{store: st, deferq: q, specs: []rules.Spec{
		{Name: "jobs", Match: rules.MatchSpec{Path: "/job"}, Rate: "1/h", Action: "defer"},
		{Name: "shaped", Rate: "100/s", Algorithm: "leaky_bucket", Action: "delay", MaxDelay: time.Second},
		{Name: "per-ip", Rate: "3/h", Algorithm: "fixed_window", Key: []string{"ip"}},
	}})
	resp, err := http.Post(f.proxy.URL+"/job", "text/plain", strings.NewReader("first"))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first job: %d, want 200", resp.StatusCode)
	}
	open := func() float64 {
		mfs, _ := f.reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "sluice_connections_open" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1
	}
	before := open() // the first request's keep-alive connection
	// The second job, jobs spent: charged by shaped and per-ip (2 of 3),
	// its client gone as the charge is made.
	st.armed.Store(true)
	conn, err := net.Dial("tcp", f.proxy.Addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /job HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\njob")
	<-st.charging
	conn.Close()
	// Its connection is let go once its handler has returned.
	deadline := time.Now().Add(30 * time.Second) // a bound, not a threshold
	for open() != before {
		if time.Now().After(deadline) {
			t.Fatal("the gone request still holds its connection")
		}
		runtime.Gosched()
	}
	// per-ip is as before the gone request (1 of 3): two more pass.
	for i, want := range []int{200, 200, 429} {
		resp, body := get(t, f.proxy.URL+"/other", nil)
		if resp.StatusCode != want {
			t.Fatalf("GET /other #%d after a deferred request whose client left: %d %s, want %d (per-ip given back its charge)", i+1, resp.StatusCode, body, want)
		}
	}
}
