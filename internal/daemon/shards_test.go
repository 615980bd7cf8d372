package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/redistest"
)

// A reload that changes a rule's shards keeps the counts of the shards
// both counts have (the first min(old, new): a shard's key depends only on
// the key and its place), under their new shares; a shard added starts
// empty, one dropped is forgotten, and the key alone, unsharded, has its
// own count. So the change may admit up to one extra limit in the window
// it happens in, never more; here a fixed window of 90 a day, saturated.
// Each call to Redis gets 10 s, as newHotPair's: a call cut short by a
// loaded machine's pause past 2 s is decided on on_error (allow), and the counts
// off.
func TestReloadShardCount(t *testing.T) {
	rs := redistest.StartServer(t)
	redistest.ClearOfWindowEdge(t, 24*time.Hour, 5*time.Minute) // one day's window throughout
	conf := func(shards string) string {
		return fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], timeout: 10s}
rules:
  - name: split
    rate: 90/d
    algorithm: fixed_window
%s`, rs.Addr, shards)
	}
	td := startDaemon(t, conf("    shards: 3\n"))
	total := 0
	for _, step := range []struct {
		shards string
		more   int // admitted by this step, in a window already full
	}{
		{"    shards: 3\n", 90}, // 30 + 30 + 30
		{"    shards: 2\n", 30}, // shards 0 and 1 keep 30 each, now of 45
		{"    shards: 3\n", 0},  // 0 and 1 hold 45 each of 30; shard 2 still holds its 30
		{"    shards: 5\n", 36}, // 18 each: 0, 1 and 2 are full; 3 and 4 start empty
		{"", 90},                // the key alone, never used
		{"    shards: 5\n", 0},  // the five shards as they were
	} {
		if !strings.Contains(rulesInForce(t, td), "split") {
			t.Fatal("rule split not in force")
		}
		if step.shards != "    shards: 3\n" || total > 0 {
			replaceFile(t, td.path, conf(step.shards))
			if r := td.waitReload(); r.Err != nil {
				t.Fatalf("reload to %q: %v", step.shards, r.Err)
			}
		}
		got := allowedOf(t, td.api, "split", "acme", 300)
		total += got
		if got != step.more {
			t.Errorf("after reload to %q: %d more admitted, want %d (total %d)", strings.TrimSpace(step.shards), got, step.more, total)
		}
	}
}

// A report past the limit of a sharded key puts the whole key in debt, as
// it does unsharded: the next checks are refused on every shard. Charged
// to one shard only, the debt left the other shards admitting: after a
// report of 180 against 90 an hour over 3 shards, 20 of 30 checks passed.
// For a rule (POST /v1/report) and an Envoy descriptor with report: true.
func TestReportSharded(t *testing.T) {
	t.Parallel() // a Cluster (or Redis) and daemons of its own
	for _, kind := range []string{"redis", "cluster"} {
		t.Run(kind, func(t *testing.T) { testReportSharded(t, storeBlock(t, kind)) })
	}
}

func testReportSharded(t *testing.T, store string) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "ratelimit"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ratelimit", "llm.yaml"), []byte(`domain: llm
descriptors:
  - key: team
    report: true
    algorithm: token_bucket
    shards: 3
    rate_limit: {unit: hour, requests_per_unit: 90}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(`
listen: 127.0.0.1:0
grpc:
  listen: 127.0.0.1:0
  config: [ratelimit]
rules:
  - name: tokens
    rate: 90/h
    algorithm: token_bucket
    shards: 3
%s`, store)), 0o644); err != nil {
		t.Fatal(err)
	}
	ed := dialEnvoy(t, startDaemonFile(t, path))

	r := do(t, "POST", ed.api+"/v1/report", `{"rule":"tokens","key":"team","cost":180}`)
	if r.status != 200 || !strings.Contains(r.body, `"allowed":false`) {
		t.Fatalf("POST /v1/report 180 against 90/h: %d %s, want 200 not allowed", r.status, r.body)
	}
	if n := allowedOf(t, ed.api, "tokens", "team", 30); n != 0 {
		t.Errorf("rule: after a report of twice the limit, %d of 30 checks allowed, want 0 (the key is in debt)", n)
	}

	ask := func(hits uint64) rlsv3.RateLimitResponse_Code {
		d := entries("team", "a")
		d.HitsAddend = wrapperspb.UInt64(hits)
		return ed.ask("llm", d).OverallCode
	}
	if c := ask(180); c != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("descriptor: report of 180 against 90/h: %v, want OVER_LIMIT (charged, over)", c)
	}
	ok := 0
	for range 30 {
		if ask(0) == rlsv3.RateLimitResponse_OK {
			ok++
		}
	}
	if ok != 0 {
		t.Errorf("descriptor: after a report of twice the limit, %d of 30 checks OK, want 0 (the key is in debt)", ok)
	}
}
