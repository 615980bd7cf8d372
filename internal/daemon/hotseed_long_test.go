package daemon

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/rules"
)

// A key of shards: auto whose value is as long as the rules keep raw
// (rules.MaxKeyLen bytes, under the rule's name and fingerprint) is
// carried across a move as a short one is. The summary kept 256 bytes of
// a key and wrote a longer one digested ("…" and 16 hex digits), which the
// seeds cannot rebuild: the key went to its shards uncharged, and they
// admitted a fresh limit on top of the 40 its own key had used (100 of 60).
func TestAutoShardsLongKeyMoveKeepsCount(t *testing.T) {
	t.Parallel() // a Cluster and daemons of its own
	f := newSeedFixture(t)
	r := f.a.engine().Rules().Rule(f.name)
	f.key = r.StoreKey(strings.Repeat("t", rules.MaxKeyLen))
	f.rule.Key = f.key
	if len(f.key) <= 256 {
		t.Fatalf("key of %d bytes, want one past 256", len(f.key))
	}
	f.coldThenHot()
	f.decide(f.b, "hot", 100, true)
	if f.total != 60 {
		t.Errorf("admitted %d in the window over the move, want its limit 60", f.total)
	}
}
