package server_test

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/internal/logtest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
)

// bigGatherer answers each Gather, once the test lets it go (release),
// with one family of many series: an answer far larger than the
// buffers between the handler and the socket, as a scrape with the
// Envoy labels full is. begun tells each Gather begun.
type bigGatherer struct {
	begun, release chan struct{}
	mf             []*dto.MetricFamily
}

func newBigGatherer() *bigGatherer {
	name, help, typ := "sluice_test_series", "many series", dto.MetricType_COUNTER
	mf := &dto.MetricFamily{Name: &name, Help: &help, Type: &typ}
	for i := range 20000 {
		ln, lv, v := "label", "value-of-some-length-"+strconv.Itoa(i), float64(i)
		mf.Metric = append(mf.Metric, &dto.Metric{Label: []*dto.LabelPair{{Name: &ln, Value: &lv}}, Counter: &dto.Counter{Value: &v}})
	}
	return &bigGatherer{begun: make(chan struct{}, 1), release: make(chan struct{}, 1), mf: []*dto.MetricFamily{mf}}
}

func (g *bigGatherer) Gather() ([]*dto.MetricFamily, error) {
	g.begun <- struct{}{}
	<-g.release
	return g.mf, nil
}

// TestScrapeHangUpsLogThrottled: /metrics is open to anyone, and a
// client that asks for it and hangs up (a reset) before its answer is
// written makes the write fail: a client can do that as often as it
// likes, so its lines are throttled as every line a client can provoke
// is — one a second, with the count of those left out — not an error
// line per scrape.
func TestScrapeHangUpsLogThrottled(t *testing.T) {
	g := newBigGatherer()
	logs := new(redistest.SyncBuffer)
	now := time.Unix(1_700_000_000, 0)
	var clock atomic.Int64
	clock.Store(now.UnixNano())
	f := start(t, memstore.New(memstore.Options{}), "", func(o *server.Options) {
		o.Gatherer = g
		o.Logger = slog.New(slog.NewTextHandler(logs, nil))
		o.Now = func() time.Time { return time.Unix(0, clock.Load()) }
	})
	h := f.srv.Config.Handler
	served := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { served <- struct{}{} }()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	hangUp := func() {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("GET /metrics HTTP/1.1\r\nHost: sluice\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		<-g.begun
		c.(*net.TCPConn).SetLinger(0) // a reset: the handler's writes fail at once
		c.Close()
		g.release <- struct{}{}
		<-served
	}
	const n = 20
	logtest.OncePerSecond(t, "scrapes hung up", "error encoding and sending metric family", n, logs.Lines, hangUp,
		func() { clock.Add(int64(time.Second)) })
}
