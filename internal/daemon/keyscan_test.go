package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/redistest"
)

// maxRedisKeyLen bounds every Redis key the daemon writes, whatever the
// client sends: a rule's key is its name (≤ 64 bytes), fingerprint and
// value (≤ 256 bytes, or its SHA-256), an Envoy descriptor's up to 512
// bytes, then escaped for the hash tag (at worst doubled) and perhaps a
// shard's namespace and tag.
const maxRedisKeyLen = 1500

// nastyKeys are key values a client may send to get a key into a slot, a
// namespace or a script it should not reach: hash-tag braces, escapes,
// separators, NUL and newlines, a shard's spelling, a hashed key's
// spelling, and long values (a 1 MiB one among them).
func nastyKeys() []string {
	return []string{
		"plain", "a}b", "{x}", "}", "{", `\`, `a\)b`, `\\}{`, "k\x00z", "line\nfeed\r\n",
		"tenant#0", "tenant#1", "#hash", "##", "rule|fp|v", "|", "%00", "é", "\xff\xfe",
		strings.Repeat("}", 300), strings.Repeat(`\`, 255), strings.Repeat("x", 257),
		strings.Repeat("{}", 4096), strings.Repeat("k", 1<<20),
	}
}

// TestRedisKeysExpireAndStayBounded runs every algorithm in every mode
// (exact, sync, lease, shards: N and auto) and action (reject, shadow,
// delay, defer), through the decision API (check and report), the proxy,
// forward auth and Envoy's POST /json, with random keys among nastyKeys,
// then stops the daemon (leases and sync hits go back) and scans Redis:
// every key must have an expiry (but the defer queue's streams, which are
// the queue) and be at most maxRedisKeyLen bytes.
func TestRedisKeysExpireAndStayBounded(t *testing.T) {
	for _, kind := range []string{"redis", "cluster"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel() // a Redis or Cluster, a daemon and an upstream of its own
			testRedisKeys(t, kind)
		})
	}
}

type scanRule struct {
	name, alg, mode, action string
}

// scanRules returns the rules of every valid combination of algorithm,
// fleet mode and action, as YAML, and their list; config.Parse decides
// which combinations are valid.
func scanRules(t *testing.T, head string) (string, []scanRule) {
	t.Helper()
	modes := []string{"", "sync: 5ms", "lease: auto", "lease: 2", "shards: 3", "shards: auto"}
	var b strings.Builder
	var list []scanRule
	for _, alg := range sluice.Algorithms() {
		for mi, mode := range modes {
			for _, action := range []string{"reject", "shadow", "delay", "defer"} {
				name := fmt.Sprintf("%s-m%d-%s", strings.ReplaceAll(alg.String(), "_", ""), mi, action)
				var r strings.Builder
				fmt.Fprintf(&r, "  - name: %s\n    match: {path: /%s}\n", name, name)
				if len(list)%2 == 0 {
					r.WriteString("    key: [query:k]\n")
				} else {
					r.WriteString("    key: [header:X-K, cookie:c]\n")
				}
				fmt.Fprintf(&r, "    rate: 5/s\n    algorithm: %s\n    action: %s\n", alg, action)
				if mode != "" {
					fmt.Fprintf(&r, "    %s\n", mode)
				}
				if action == "delay" {
					r.WriteString("    max_delay: 50ms\n")
				}
				if _, err := config.Parse("scan.yaml", []byte(head+"rules:\n"+r.String())); err != nil {
					continue // not a valid combination
				}
				b.WriteString(r.String())
				list = append(list, scanRule{name, alg.String(), mode, action})
			}
		}
	}
	return b.String(), list
}

// scanDescriptors returns an Envoy descriptor file with every algorithm
// in every fleet mode, and with report: true.
func scanDescriptors() string {
	var b strings.Builder
	b.WriteString("domain: scan\ndescriptors:\n")
	for _, alg := range sluice.Algorithms() {
		for mi, mode := range []string{"", "sync: 5ms", "lease: 2", "shards: 3", "shards: auto", "report: true"} {
			if strings.HasPrefix(mode, "sync") || strings.HasPrefix(mode, "lease") {
				if alg == sluice.LeakyBucket || alg == sluice.SlidingWindowLog {
					continue
				}
			}
			fmt.Fprintf(&b, "  - key: %s-m%d\n    algorithm: %s\n    rate_limit: {unit: second, requests_per_unit: 5}\n", alg, mi, alg)
			if mode != "" {
				fmt.Fprintf(&b, "    %s\n", mode)
			}
			fmt.Fprintf(&b, "    descriptors:\n      - key: user\n        algorithm: %s\n        rate_limit: {unit: second, requests_per_unit: 5}\n", alg)
			if mode != "" {
				fmt.Fprintf(&b, "        %s\n", mode)
			}
		}
	}
	return b.String()
}

func testRedisKeys(t *testing.T, kind string) {
	var addrs []string
	redisBlock := ""
	if kind == "redis" {
		addrs = []string{redistest.StartServer(t).Addr}
		redisBlock = fmt.Sprintf("{addrs: [%s], timeout: 5s}", addrs[0])
	} else {
		addrs = redistest.StartCluster(t).Addrs
		redisBlock = fmt.Sprintf("{addrs: [%s], cluster: true, timeout: 5s}", strings.Join(addrs, ", "))
	}
	// The upstream fails requests marked fail=1, so that some deferred
	// requests are retried and dead-lettered.
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Query().Get("fail") == "1" {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(up.Close)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "scan-descriptors.yaml"), []byte(scanDescriptors()), 0o644); err != nil {
		t.Fatal(err)
	}
	head := fmt.Sprintf(`listen: 127.0.0.1:0
proxy: {listen: 127.0.0.1:0, upstream: %s}
grpc: {listen: 127.0.0.1:0, config: [scan-descriptors.yaml]}
store: {type: redis, redis: %s}
limits: {max_body_bytes: 4194304}
defer: {max_attempts: 2, backoff: 1ms, max_backoff: 1ms, claim_idle: 1s}
`, up.URL, redisBlock)
	// Rules are validated without the grpc block, whose file Parse
	// would look for beside scan.yaml.
	ruleYAML, rules := scanRules(t, strings.Replace(head, "grpc: {listen: 127.0.0.1:0, config: [scan-descriptors.yaml]}\n", "", 1))
	for _, action := range []string{"reject", "shadow", "delay", "defer"} {
		n := 0
		for _, r := range rules {
			if r.action == action {
				n++
			}
		}
		if n == 0 {
			t.Fatalf("no valid rule with action %s", action)
		}
	}
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte(head+"rules:\n"+ruleYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	td := startDaemonFile(t, path)

	const seed = 11 // the same requests every run (their timing varies)
	t.Logf("%d rules", len(rules))
	rng := rand.New(rand.NewPCG(seed, 1))
	keys := nastyKeys()
	key := func() string {
		if rng.IntN(3) == 0 {
			return "hot" // a key hot enough for shards: auto
		}
		return keys[rng.IntN(len(keys))]
	}
	short := func(k string) string { // fits a header, a cookie and a URL
		if len(k) > 4096 {
			return k[:4096]
		}
		return k
	}
	var deferred []string
	for i := range 800 {
		r := rules[rng.IntN(len(rules))]
		k := key()
		switch op := rng.IntN(6); op {
		case 0, 1: // the decision API: check and report
			ep := "/v1/check"
			if op == 1 {
				ep = "/v1/report"
			}
			body, _ := json.Marshal(map[string]any{"rule": r.name, "key": k, "cost": 1 + rng.IntN(3)})
			if rep := do(t, http.MethodPost, td.api+ep, string(body), "Content-Type", "application/json"); rep.status != http.StatusOK && rep.status != http.StatusBadRequest {
				t.Fatalf("POST %s %s: %d %s", ep, r.name, rep.status, rep.body)
			}
		case 2, 3: // the proxy, keyed by query (NUL, newlines) or header and cookie
			target := td.proxy + "/" + r.name + "?k=" + url.QueryEscape(short(k))
			if rng.IntN(4) == 0 {
				target += "&fail=1"
			}
			hk := strings.Map(func(c rune) rune { // a header value holds no control bytes
				if c < 0x20 || c == 0x7f {
					return '_'
				}
				return c
			}, short(k))
			for range 1 + rng.IntN(8) { // a burst, to pass the limit
				rep := doCookie(t, http.MethodPost, target, "body", hk)
				if rep.status == http.StatusAccepted {
					var a struct {
						ID string `json:"deferred_id"`
					}
					if err := json.Unmarshal([]byte(rep.body), &a); err != nil || a.ID == "" {
						t.Fatalf("202 from %s: %q", target, rep.body)
					}
					deferred = append(deferred, a.ID)
				}
			}
		case 4: // forward auth, for the same rules
			do(t, http.MethodGet, td.api+"/v1/forward-auth", "", "X-Forwarded-Method", "POST",
				"X-Forwarded-Uri", "/"+r.name+"?k="+url.QueryEscape(short(k)), "X-Forwarded-For", "198.51.100.7")
		case 5: // Envoy's HTTP form
			alg := sluice.Algorithms()[rng.IntN(len(sluice.Algorithms()))]
			d := fmt.Sprintf("%s-m%d", alg, rng.IntN(6))
			body, _ := json.Marshal(map[string]any{"domain": "scan", "hits_addend": 1 + rng.IntN(2), "descriptors": []any{
				map[string]any{"entries": []any{map[string]string{"key": d, "value": k}}},
				map[string]any{"entries": []any{map[string]string{"key": d, "value": k}, map[string]string{"key": "user", "value": key()}}},
			}})
			if rep := do(t, http.MethodPost, td.api+"/json", string(body)); rep.status != http.StatusOK && rep.status != http.StatusTooManyRequests {
				t.Fatalf("POST /json (%s): %d %s", d, rep.status, rep.body)
			}
		}
		if i%200 == 199 {
			// A burst of one key, hot enough for shards: auto.
			for _, r := range rules {
				if r.mode == "shards: auto" {
					for range 20 {
						check(t, td.api, r.name, "hot", 1)
					}
				}
			}
		}
	}
	if len(deferred) == 0 {
		t.Fatal("no request was deferred")
	}
	// One key of a shards: auto rule made hot for sure: it is sharded
	// (on the Cluster) and shared with the fleet in a sorted set.
	var auto scanRule
	for _, r := range rules {
		if r.mode == "shards: auto" && r.action == "reject" {
			auto = r
			break
		}
	}
	e := td.d.engine()
	ar := e.Rules().Rule(auto.name)
	hot := ar.StoreKey("hot")
	for hotUntil := time.Now().Add(time.Minute); !td.d.hot.Rule(auto.name).Hot.Has(hot); {
		if time.Now().After(hotUntil) {
			t.Fatalf("%s: key never became hot", auto.name)
		}
		for range 200 {
			e.Check(context.Background(), ar, hot, 1)
		}
	}
	// Every deferred request settles (delivered or dead-lettered), so
	// that its place in its key's order is done with.
	deadline := time.Now().Add(2 * time.Minute)
	for _, id := range deferred {
		for {
			r := get(t, td.api+"/v1/deferred/"+id)
			var st struct {
				State string `json:"state"`
			}
			json.Unmarshal([]byte(r.body), &st)
			if st.State == "delivered" || st.State == "dead_lettered" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET /v1/deferred/%s: %d %s, not settled in 2 minutes", id, r.status, r.body)
			}
			time.Sleep(20 * time.Millisecond) // a poll, not a synchronisation
		}
	}
	// The hot set reaches Redis at the next refresh of the hot keys.
	for shared := time.Now().Add(time.Minute); ; {
		if redisExists(addrs, "sluice:hot:"+auto.name) {
			break
		}
		if time.Now().After(shared) {
			t.Fatalf("the hot keys of %s never reached Redis", auto.name)
		}
		time.Sleep(20 * time.Millisecond) // a poll, not a synchronisation
	}
	if err := td.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	stored := scanKeys(t, addrs)
	// Every kind of key the run should have made is there (so checked).
	families := map[string]string{
		"a rule's counter":     "sluice:{",
		"a shard's counter":    "sluice:shard|{",
		"a sync writers hash":  "}|writers",
		"a deferred status":    "}:s:",
		"a defer stream":       "}:q",
		"a dead-letter stream": "}:dead",
		"the fleet's hot set":  "sluice:hot:",
	}
	for what, marker := range families {
		found := false
		for _, k := range stored {
			if strings.Contains(k, marker) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("no %s (%q) among the %d keys: the run did not make one", what, marker, len(stored))
		}
	}
}

// redisExists reports whether key exists on one of the nodes at addrs.
func redisExists(addrs []string, key string) bool {
	for _, a := range addrs {
		if n, err := redistest.Do(a, "EXISTS", key); err == nil && n == "1" {
			return true
		}
	}
	return false
}

// scanKeys reads every key of every node and checks its expiry and length;
// it returns the keys.
func scanKeys(t *testing.T, addrs []string) []string {
	t.Helper()
	ctx := context.Background()
	total, longest := 0, 0
	var all []string
	for _, addr := range addrs {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if role, _ := c.Do(ctx, c.B().Role().Build()).ToArray(); len(role) > 0 {
			if r, _ := role[0].ToString(); r != "master" {
				continue
			}
		}
		cursor := uint64(0)
		for {
			e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Count(1000).Build()).AsScanEntry()
			if err != nil {
				t.Fatalf("SCAN on %s: %v", addr, err)
			}
			for _, k := range e.Elements {
				total++
				all = append(all, k)
				longest = max(longest, len(k))
				if len(k) > maxRedisKeyLen {
					t.Errorf("key of %d bytes (over %d): %.120q…", len(k), maxRedisKeyLen, k)
				}
				pttl, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
				if err != nil {
					t.Fatalf("PTTL %q: %v", k, err)
				}
				if pttl == -1 && !queueStream(k) {
					typ, _ := c.Do(ctx, c.B().Type().Key(k).Build()).ToString()
					t.Errorf("%s key without expiry: %.200q", typ, k)
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	t.Logf("%d keys, the longest %d bytes", total, longest)
	if total == 0 {
		t.Fatal("no key in Redis after the run")
	}
	return all
}

// queueStream reports whether k is a defer queue's stream or dead-letter
// stream, which hold requests until they are replayed (docs/defer.md) and
// so have no expiry.
func queueStream(k string) bool {
	return strings.HasPrefix(k, "sluice:defer:{") && (strings.HasSuffix(k, "}:q") || strings.HasSuffix(k, "}:dead"))
}

// doCookie sends a request with the key in X-K and in cookie c.
func doCookie(t *testing.T, method, target, body, k string) reply {
	t.Helper()
	req, err := http.NewRequest(method, target, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-K", k)
	req.Header.Set("Cookie", "c="+url.QueryEscape(k))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}
}
