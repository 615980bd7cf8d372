package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/redistest"
)

// testDaemon is a daemon started on :0 listeners from a real config file in
// a temporary directory, stopped (and checked for a clean exit) when the
// test ends.
type testDaemon struct {
	t       testing.TB
	d       *Daemon
	path    string // config file
	api     string // http://host:port of the decision API
	proxy   string // http://host:port of the proxy, or ""
	reloads chan ReloadResult
	logs    *redistest.SyncBuffer
	cancel  context.CancelFunc
	done    chan error
}

// startDaemon writes yaml to a config file and runs a daemon on it.
func startDaemon(t testing.TB, yaml string) *testDaemon {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return startDaemonFile(t, path)
}

// startDaemonFile runs a daemon on the config file at path.
func startDaemonFile(t testing.TB, path string) *testDaemon {
	t.Helper()
	return startDaemonWith(t, path, nil)
}

// startDaemonAligned is startDaemon on a clock (Options.Now) that reads
// the start of the current UTC day when the daemon starts, then runs as
// the wall clock does. For the tests that count a memory store's
// decisions of a rule with a window of a minute: on the wall clock, a
// minute's boundary falling between two of their requests frees a unit
// (a fixed window starts over; a sliding window counter's estimate of the
// window before drops by one) and fails them, about once in 60 s / the
// time they take. On this clock none falls in their first minute.
func startDaemonAligned(t testing.TB, yaml string) *testDaemon {
	t.Helper()
	return startDaemonFrom(t, yaml, time.Now().UTC().Truncate(24*time.Hour))
}

// startDaemonFrom is startDaemon on a clock that reads t0 when the daemon
// starts, then runs as the wall clock does.
func startDaemonFrom(t testing.TB, yaml string, t0 time.Time) *testDaemon {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	return startDaemonWith(t, path, func(o *Options) { o.Now = func() time.Time { return t0.Add(time.Since(start)) } })
}

// startDaemonWith is startDaemonFile with set, if not nil, changing the
// daemon's Options first.
func startDaemonWith(t testing.TB, path string, set func(*Options)) *testDaemon {
	t.Helper()
	return startDaemonThen(t, path, set, nil)
}

// startDaemonThen is startDaemonWith with before, if not nil, given the
// daemon New made before it runs.
func startDaemonThen(t testing.TB, path string, set func(*Options), before func(*Daemon)) *testDaemon {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatalf("config.Load(%s): %v", path, err)
	}
	td := &testDaemon{t: t, path: path, reloads: make(chan ReloadResult, 64), logs: new(redistest.SyncBuffer), done: make(chan error, 1)}
	logger := slog.New(slog.NewTextHandler(td.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts := Options{
		Logger:         logger,
		ConfigPath:     path,
		ReloadDebounce: 20 * time.Millisecond,
		OnReload:       func(r ReloadResult) { td.reloads <- r },
	}
	if set != nil {
		set(&opts)
	}
	began := time.Now()
	td.d, err = New(cfg, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	took := time.Since(began)
	a := td.d.Addrs()
	td.api = "http://" + a.API
	if a.Proxy != "" {
		td.proxy = "http://" + a.Proxy
	}
	if before != nil {
		before(td.d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	td.cancel = cancel
	go func() { td.done <- td.d.Run(ctx) }()
	t.Cleanup(func() {
		if err := td.stop(); err != nil {
			t.Errorf("Run returned %v after cancel, want nil", err)
		}
		if t.Failed() {
			t.Logf("daemon logs:\n%s", td.logs.String())
		}
	})
	if td.d.lazy != nil && !td.d.lazy.Connected() && took >= time.Second {
		td.awaitRedisRetry()
	}
	return td
}

// awaitRedisRetry waits, after a start whose one try at Redis timed out
// (New took its bound, a second at least; a refused connection fails at
// once), for the daemon's next try, a ConnectRetry later: until it has
// connected, or has logged that Redis does not answer or refused it. On a
// loaded machine that first try can miss a test's 2s timeout with Redis
// up (at a load average of 30 TestDeferThroughProxy's did: every request
// was let through on the store error), and until the daemon connects
// every decision fails; a test that starts a daemon on a Redis that is up
// means it to decide there from its first request. A Redis down or hung
// on purpose fails the next try too, and the test goes on as before.
func (td *testDaemon) awaitRedisRetry() {
	deadline := time.Now().Add(30 * time.Second)
	for !td.d.lazy.Connected() && time.Now().Before(deadline) {
		if l := td.logs.String(); strings.Contains(l, "Redis does not answer; retrying") || strings.Contains(l, "Redis refused the connection") {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stop cancels Run and returns its result (once; later calls return nil).
func (td *testDaemon) stop() error {
	td.cancel()
	select {
	case err, ok := <-td.done:
		if ok {
			close(td.done)
		}
		return err
	case <-time.After(30 * time.Second):
		return fmt.Errorf("Run did not return within 30s of cancel")
	}
}

// waitConnected waits until the daemon has connected to Redis. It tries
// once while it starts, for the store's timeout (at least a second), then
// every ConnectRetry, and until it has connected every decision fails
// (store.on_error applies): on a loaded machine that first try can miss a
// test's 2s timeout (TestDeferThroughProxy's did at a load average of 30,
// and its requests were all let through, none deferred). A test whose
// requests must be decided in Redis from the first waits for this.
func (td *testDaemon) waitConnected() {
	td.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !td.d.lazy.Connected() {
		if time.Now().After(deadline) {
			td.t.Fatal("not connected to Redis 30s after the start")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitReload waits for the next reload attempt that did something: not
// one that found the content unchanged, nor one put off while the file
// was being written, nor one that found it missing.
func (td *testDaemon) waitReload() ReloadResult {
	td.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case r := <-td.reloads:
			if r.Unchanged || r.Writing || r.Missing {
				continue
			}
			return r
		case <-deadline:
			td.t.Fatal("no reload within 10s")
			return ReloadResult{}
		}
	}
}

// metric returns the value of the counter, gauge or histogram count named
// name whose labels include labels (name=value pairs), or 0.
func (td *testDaemon) metric(name string, labels ...string) float64 {
	td.t.Helper()
	return gather(td.t, td.d, name, labels...)
}

func gather(t testing.TB, d *Daemon, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := d.Registry().Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var sum float64
		for _, m := range mf.GetMetric() {
			if !hasLabels(m, labels) {
				continue
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
		return sum
	}
	return 0
}

func hasLabels(m *dto.Metric, kv []string) bool {
	for i := 0; i+1 < len(kv); i += 2 {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == kv[i] && lp.GetValue() == kv[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// reply is a response read in full.
type reply struct {
	status int
	header http.Header
	body   string
}

var client = &http.Client{Timeout: 20 * time.Second}

func do(t *testing.T, method, url string, body string, header ...string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return reply{resp.StatusCode, resp.Header, string(b)}
}

func get(t *testing.T, url string, header ...string) reply {
	t.Helper()
	return do(t, http.MethodGet, url, "", header...)
}

// check calls POST /v1/check and decodes the answer.
func check(t *testing.T, api, rule, key string, cost int) (checkAnswer, int) {
	t.Helper()
	r := do(t, http.MethodPost, api+"/v1/check", fmt.Sprintf(`{"rule":%q,"key":%q,"cost":%d}`, rule, key, cost), "Content-Type", "application/json")
	var a checkAnswer
	if r.status == http.StatusOK {
		if err := json.Unmarshal([]byte(r.body), &a); err != nil {
			t.Fatalf("POST /v1/check: body %q: %v", r.body, err)
		}
	}
	return a, r.status
}

type checkAnswer struct {
	Allowed      bool  `json:"allowed"`
	Limit        int64 `json:"limit"`
	Remaining    int64 `json:"remaining"`
	RetryAfterMS int64 `json:"retry_after_ms"`
	ResetAfterMS int64 `json:"reset_after_ms"`
}

// upstream is a real HTTP upstream that counts the requests it gets and
// records their X-Forwarded-For.
type upstream struct {
	url  string
	mu   sync.Mutex
	hits int
	xff  []string
}

func startUpstream(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.hits++
		u.xff = append(u.xff, r.Header.Get("X-Forwarded-For"))
		u.mu.Unlock()
		io.WriteString(w, "upstream says hi")
	}))
	t.Cleanup(srv.Close)
	u.url = srv.URL
	return u
}

func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.hits
}

// storeBlock returns the store: block of a config for kind: "" for memory
// (the default), a real redis-server for "redis", a real 3-node Cluster for
// "cluster", each started for t. The timeout is generous: these tests check
// decisions on a loaded machine, not the timeout.
func storeBlock(t *testing.T, kind string) string {
	t.Helper()
	switch kind {
	case "redis":
		return "store:\n  type: redis\n  redis: {addrs: [" + redistest.StartServer(t).Addr + "], timeout: 5s}\n"
	case "cluster":
		return "store:\n  type: redis\n  redis: {addrs: [" + strings.Join(redistest.StartCluster(t).Addrs, ", ") + "], cluster: true, timeout: 5s}\n"
	}
	return ""
}
