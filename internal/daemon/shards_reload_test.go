package daemon

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// A reload that changes a rule's shards keeps the counts of the shards
// both counts have (the first min(old, new): a shard's key depends only on
// the key and its place), under their new shares; a shard added starts
// empty, one dropped is forgotten, and the key alone, unsharded, has its
// own count. So the change may admit up to one extra limit in the window
// it happens in, never more; here a fixed window of 90 a day, saturated.
func TestReloadShardCount(t *testing.T) {
	rs := redistest.StartServer(t)
	conf := func(shards string) string {
		return fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
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
