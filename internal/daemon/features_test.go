package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/redistest"
)

// GET /v1/hotkeys names the heavy key among 10,000 light ones, and the
// metrics carry the top keys only.
func TestHotKeysEndpoint(t *testing.T) {
	td := startDaemon(t, `
listen: 127.0.0.1:0
rules:
  - name: api
    rate: 1000/s
`)
	e := td.d.engine()
	r := e.Rules().Rule("api")
	ctx := context.Background()
	for i := range 10_000 {
		e.Check(ctx, r, "light-"+strconv.Itoa(i), 1)
		if i%10 == 0 {
			e.Check(ctx, r, "heavy", 1)
		}
	}
	// And a few through the API, as a client sends them.
	for range 20 {
		if _, status := check(t, td.api, "api", "heavy", 1); status != http.StatusOK {
			t.Fatalf("POST /v1/check: %d", status)
		}
	}
	got := get(t, td.api+"/v1/hotkeys?k=3")
	var body struct {
		Rules []struct {
			Rule string  `json:"rule"`
			Rate float64 `json:"rate"`
			Keys []struct {
				Key   string  `json:"key"`
				Rate  float64 `json:"rate"`
				Share float64 `json:"share"`
			} `json:"keys"`
		} `json:"rules"`
	}
	if err := json.Unmarshal([]byte(got.body), &body); err != nil || got.status != 200 {
		t.Fatalf("GET /v1/hotkeys: %d %q: %v", got.status, got.body, err)
	}
	if len(body.Rules) != 1 || body.Rules[0].Rule != "api" || len(body.Rules[0].Keys) == 0 || len(body.Rules[0].Keys) > 3 {
		t.Fatalf("GET /v1/hotkeys?k=3 = %s, want rule api with up to 3 keys", got.body)
	}
	if k := body.Rules[0].Keys[0]; k.Key != "heavy" || k.Rate <= 0 || k.Share <= 0 {
		t.Fatalf("heaviest key = %+v, want heavy", k)
	}
	if td.metric("sluice_hot_key_rate", "rule", "api", "key", "heavy") <= 0 {
		t.Errorf("sluice_hot_key_rate{rule=api,key=heavy} not exported")
	}
	m := get(t, td.api+"/metrics").body
	if n := strings.Count(m, "sluice_hot_key_rate{"); n > 10 {
		t.Errorf("%d sluice_hot_key_rate series, want at most the top 10", n)
	}
	for _, bad := range []string{"?k=0", "?k=x", "?k=100000"} {
		if r := get(t, td.api+"/v1/hotkeys"+bad); r.status != http.StatusBadRequest || !strings.Contains(r.body, "k:") {
			t.Errorf("GET /v1/hotkeys%s: %d %q, want 400 naming k", bad, r.status, r.body)
		}
	}
	if r := get(t, td.api+"/v1/hotkeys?rule=nope"); r.status != http.StatusNotFound {
		t.Errorf("GET /v1/hotkeys?rule=nope: %d, want 404", r.status)
	}
}

// evalshaCalls reads each Cluster node's EVALSHA count.
func evalshaCalls(t *testing.T, c *redistest.Cluster) []int64 {
	t.Helper()
	var out []int64
	for _, a := range c.Addrs {
		info, err := redistest.Do(a, "INFO", "commandstats")
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		if _, rest, ok := strings.Cut(info, "cmdstat_evalsha:calls="); ok {
			v, _, _ := strings.Cut(rest, ",")
			n, _ = strconv.ParseInt(v, 10, 64)
		}
		out = append(out, n)
	}
	return out
}

func busiestShare(before, after []int64) float64 {
	var sum, top int64
	for i := range before {
		d := after[i] - before[i]
		sum += d
		top = max(top, d)
	}
	if sum == 0 {
		return 0
	}
	return float64(top) / float64(sum)
}

// shards: 3 on a 3-node Cluster: one key's decisions spread over the
// nodes, and the key still admits exactly its limit (a steady overload).
// shards: auto shards a key once it is hot.
// Each call to Redis gets 10 s, as newHotPair's: a call cut short by a
// loaded machine's pause past 2 s is decided on on_error (allow), and the count
// or the hot key's answer off.
func TestShardsOnCluster(t *testing.T) {
	t.Parallel() // a Cluster (or Redis) and daemons of its own
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	c := redistest.StartCluster(t)
	td := startDaemon(t, fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], cluster: true, timeout: 10s}
rules:
  - name: split
    rate: 90/h
    algorithm: fixed_window
    shards: 3
  - name: auto
    rate: 1000000/s
    shards: auto
`, strings.Join(c.Addrs, ", ")))
	before := evalshaCalls(t, c)
	allowed := 0
	for range 300 {
		got, status := check(t, td.api, "split", "tenant", 1)
		if status != http.StatusOK {
			t.Fatalf("POST /v1/check: %d", status)
		}
		if got.Limit != 90 {
			t.Fatalf("limit = %d, want the rule's 90", got.Limit)
		}
		if got.Allowed {
			allowed++
		}
	}
	if allowed != 90 {
		t.Errorf("sharded key admitted %d of 300, want exactly 90", allowed)
	}
	if s := busiestShare(before, evalshaCalls(t, c)); s > 0.5 {
		t.Errorf("shards: 3: busiest node ran %.0f%% of the scripts, want ≤ 50%%", s*100)
	}

	// shards: auto: a key decided fast enough becomes hot, then spreads.
	e := td.d.engine()
	r := e.Rules().Rule("auto")
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	for !td.d.hot.Rule("auto").Hot.Has(r.Name + "-hot") {
		if time.Now().After(deadline) {
			top, _ := td.d.hot.Rule("auto").Top(3, time.Now())
			t.Fatalf("key never became hot; top %+v", top)
		}
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 100 {
					e.Check(ctx, r, r.Name+"-hot", 1)
				}
			})
		}
		wg.Wait()
	}
	before = evalshaCalls(t, c)
	for range 300 {
		if res := e.Check(ctx, r, r.Name+"-hot", 1); !res.Allowed || res.Decision.Limit != 1_000_000 {
			t.Fatalf("hot key: %+v", res)
		}
	}
	if s := busiestShare(before, evalshaCalls(t, c)); s > 0.5 {
		t.Errorf("shards: auto, hot key: busiest node ran %.0f%% of the scripts, want ≤ 50%%", s*100)
	}
}

// action: defer through the proxy: over the limit, requests are answered
// 202 with an id and replayed to the upstream with their bodies; their
// status can be read; a body over the cap and an unknown id get clear
// answers.
func TestDeferThroughProxy(t *testing.T) {
	rs := redistest.StartServer(t)
	var mu sync.Mutex
	bodies := map[string]string{} // Idempotency-Key (or "live") → body
	var live []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		if k := r.Header.Get("Idempotency-Key"); k != "" {
			bodies[k] = r.Method + " " + r.URL.RequestURI() + " " + string(b) + " xff=" + r.Header.Get("X-Forwarded-For")
		} else {
			live = append(live, string(b))
		}
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	td := startDaemon(t, proxyConfig(up.URL, fmt.Sprintf(`
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
rules:
  - name: orders
    match: {path: /orders/*}
    rate: 5/s
    algorithm: token_bucket
    action: defer
    defer: {max_body_bytes: 64, max_queue: 100}
`, rs.Addr)))
	td.waitConnected()
	ids := map[string]string{} // id → body sent
	for i := range 12 {
		body := "order-" + strconv.Itoa(i)
		r := do(t, http.MethodPost, td.proxy+"/orders/new?n="+strconv.Itoa(i), body)
		switch r.status {
		case http.StatusCreated:
		case http.StatusAccepted:
			var a struct {
				ID string `json:"deferred_id"`
			}
			if err := json.Unmarshal([]byte(r.body), &a); err != nil || a.ID == "" || r.header.Values("Location") != nil {
				t.Fatalf("202: body %q, Location %q; want the id and no Location (the status is on the decision API)", r.body, r.header.Values("Location"))
			}
			ids[a.ID] = fmt.Sprintf("POST /orders/new?n=%d %s xff=127.0.0.1", i, body)
		default:
			t.Fatalf("POST /orders/new: %d %q, want 201 or 202", r.status, r.body)
		}
	}
	if len(ids) == 0 {
		t.Fatal("no request was deferred")
	}
	for id, want := range ids {
		var st struct {
			State  string `json:"state"`
			Status int    `json:"status"`
		}
		deadline := time.Now().Add(time.Minute)
		for {
			r := get(t, td.api+"/v1/deferred/"+id)
			json.Unmarshal([]byte(r.body), &st)
			if r.status == 200 && st.State == "delivered" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET /v1/deferred/%s: %d %s, never delivered", id, r.status, r.body)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if st.Status != http.StatusCreated {
			t.Errorf("%s: status %d, want the upstream's 201", id, st.Status)
		}
		mu.Lock()
		got := bodies[id]
		mu.Unlock()
		if got != want {
			t.Errorf("%s reached the upstream as %q, want %q", id, got, want)
		}
	}
	mu.Lock()
	if len(live)+len(bodies) != 12 {
		t.Errorf("upstream got %d live + %d replayed, want 12 in all", len(live), len(bodies))
	}
	mu.Unlock()
	if got := td.metric("sluice_deferred_deliveries_total", "rule", "orders", "status", "2xx"); got != float64(len(ids)) {
		t.Errorf("sluice_deferred_deliveries_total = %v, want %d", got, len(ids))
	}

	// A body over the cap, while over the limit: 413 naming the cap.
	var r reply
	for range 20 {
		if r = do(t, http.MethodPost, td.proxy+"/orders/big", strings.Repeat("x", 65)); r.status != http.StatusCreated {
			break
		}
	}
	if r.status != http.StatusRequestEntityTooLarge || !strings.Contains(r.body, "max_body_bytes is 64") {
		t.Errorf("big body over the limit: %d %q, want 413 naming the cap", r.status, r.body)
	}
	if r := get(t, td.api+"/v1/deferred/0123456789ab-00000000000000000000"); r.status != http.StatusNotFound || !strings.Contains(r.body, "unknown deferred id") {
		t.Errorf("unknown id: %d %q", r.status, r.body)
	}
	if r := get(t, td.api+"/v1/deferred/nope"); r.status != http.StatusBadRequest || !strings.Contains(r.body, "malformed") {
		t.Errorf("malformed id: %d %q", r.status, r.body)
	}
}

// shards on an Envoy descriptor (Cluster): the descriptor's key spreads
// over the nodes and still admits exactly its limit; on the memory store
// shards is refused, naming file and line.
// Each call to Redis gets 10 s, as newHotPair's: a call cut short by a
// loaded machine's pause past 2 s is decided on on_error (allow), and the count
// or the hot key's answer off.
func TestEnvoyShardsOnCluster(t *testing.T) {
	t.Parallel() // a Cluster (or Redis) and daemons of its own
	c := redistest.StartCluster(t)
	dir := t.TempDir()
	descDir := filepath.Join(dir, "ratelimit")
	if err := os.MkdirAll(descDir, 0o755); err != nil {
		t.Fatal(err)
	}
	desc := "domain: hot\ndescriptors:\n  - key: tenant\n    algorithm: fixed_window\n    shards: 3\n    rate_limit: {unit: hour, requests_per_unit: 90}\n" +
		"  - key: user\n    shards: auto\n    rate_limit: {unit: second, requests_per_unit: 1000000}\n"
	if err := os.WriteFile(filepath.Join(descDir, "hot.yaml"), []byte(desc), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sluice.yaml")
	yaml := "listen: 127.0.0.1:0\ngrpc:\n  listen: 127.0.0.1:0\n  config: [ratelimit]\nstore:\n  type: redis\n  redis: {addrs: [" + strings.Join(c.Addrs, ", ") + "], cluster: true, timeout: 10s}\n"
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	td := startDaemonFile(t, path)
	before := evalshaCalls(t, c)
	ok := 0
	for range 300 {
		r := do(t, "POST", td.api+"/json", `{"domain":"hot","descriptors":[{"entries":[{"key":"tenant","value":"acme"}]}]}`)
		switch r.status {
		case 200:
			ok++
		case 429:
		default:
			t.Fatalf("POST /json: %d %s", r.status, r.body)
		}
		if !strings.Contains(r.body, `"requestsPerUnit":90`) {
			t.Fatalf("POST /json: %s, want the descriptor's limit of 90 in currentLimit", r.body)
		}
	}
	if ok != 90 {
		t.Errorf("sharded descriptor admitted %d of 300, want exactly 90", ok)
	}
	if s := busiestShare(before, evalshaCalls(t, c)); s > 0.5 {
		t.Errorf("busiest node ran %.0f%% of the scripts, want ≤ 50%%", s*100)
	}

	// shards: auto: a descriptor's key decided fast enough becomes hot
	// (its summary is named as the descriptor in metrics), then spreads.
	var m descriptors.Match
	entries := []descriptors.Entry{{Key: "user", Value: "busy"}}
	td.d.descriptorSet().Lookup("hot", entries, &m)
	if m.Rule == nil || !m.Rule.Shards.Auto {
		t.Fatalf("descriptor user: %+v, want shards: auto", m.Rule)
	}
	// Kept in the fleet's set its horizon (a second) plus HotKeysShareTTL.
	if got, want := (*td.d.hotAuto.Load())["envoy/hot/user"], HotKeysShareTTL+time.Second; got != want {
		t.Errorf("descriptor user: kept %v in the fleet's set, want %v", got, want)
	}
	storeKey := m.StoreKey(entries)
	hot := td.d.hot.Rule("envoy/hot/user")
	hotKey := strings.TrimPrefix(storeKey, m.Rule.Head())
	decide := func() (engine.DescriptorStatus, engine.DescriptorsResult) {
		ds := []engine.Descriptor{{Rule: m.Rule, Key: storeKey, Cost: 1}}
		st := make([]engine.DescriptorStatus, 1)
		res := td.d.engine().DecideDescriptors(context.Background(), ds, st)
		return st[0], res
	}
	deadline := time.Now().Add(time.Minute)
	for !hot.Hot.Has(hotKey) {
		if time.Now().After(deadline) {
			top, _ := hot.Top(3, time.Now())
			t.Fatalf("descriptor key never became hot; top %+v", top)
		}
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 100 {
					decide()
				}
			})
		}
		wg.Wait()
	}
	before = evalshaCalls(t, c)
	for range 300 {
		if st, res := decide(); res.OverLimit || res.StoreErr != nil || st.Decision.Limit != 1_000_000 {
			t.Fatalf("hot descriptor key: %+v %+v", st, res)
		}
	}
	if s := busiestShare(before, evalshaCalls(t, c)); s > 0.5 {
		t.Errorf("shards: auto, hot descriptor key: busiest node ran %.0f%% of the scripts, want ≤ 50%%", s*100)
	}

	// On the memory store, shards is refused.
	mem := filepath.Join(dir, "mem.yaml")
	if err := os.WriteFile(mem, []byte("listen: 127.0.0.1:0\ngrpc:\n  listen: 127.0.0.1:0\n  config: [ratelimit]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(mem)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDescriptors(cfg); err == nil || !strings.Contains(err.Error(), "hot.yaml:") || !strings.Contains(err.Error(), "shards") || !strings.Contains(err.Error(), "needs store.type: redis") {
		t.Errorf("LoadDescriptors on memory: %v, want shards refused with file and line", err)
	}
}

// A client's header value may hold bytes that are not UTF-8 (net/http
// passes 0x80–0xff through): the key it makes is still reported, and
// /metrics still answers (an invalid label value used to fail every scrape).
func TestHotKeysBinaryHeader(t *testing.T) {
	td := startDaemon(t, `
listen: 127.0.0.1:0
rules:
  - name: tenant
    key: [header:X-Tenant]
    rate: 1000/s
`)
	// The summary records one decision in 4, at random: of 100, none is
	// recorded with odds of (3/4)^100 ≈ 3e-13.
	for range 100 {
		if r := do(t, http.MethodGet, td.api+"/v1/forward-auth", "", "X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/", "X-Tenant", "acme\xff\xfe"); r.status != http.StatusOK {
			t.Fatalf("forward-auth: %d %q", r.status, r.body)
		}
	}
	m := get(t, td.api+"/metrics")
	if m.status != http.StatusOK || !strings.Contains(m.body, `sluice_hot_key_rate{key="tenant|`) {
		t.Fatalf("GET /metrics after a binary key: %d, want 200 with the key's series; body %.300q", m.status, m.body)
	}
}
