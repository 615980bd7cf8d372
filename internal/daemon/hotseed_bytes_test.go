package daemon

import (
	"testing"
	"unicode/utf8"
)

// A key of shards: auto that is not UTF-8 (a header may carry any byte) is
// carried across both moves as any other key. The summary kept such a key
// as text, U+FFFD for each byte that is not UTF-8 and a digest, which the
// seeds cannot rebuild: the key went to its shards uncharged (100 of 60
// admitted over the move) and came back to its own counter uncharged.
func TestAutoShardsNonUTF8KeyMoveKeepsCount(t *testing.T) {
	t.Parallel() // a Cluster and daemons of its own
	f := newSeedFixture(t)
	r := f.a.engine().Rules().Rule(f.name)
	f.key = r.StoreKey("\xff\xfe")
	f.rule.Key = f.key
	if utf8.ValidString(f.key) {
		t.Fatalf("key %q is UTF-8, want one that is not", f.key)
	}
	f.coldThenHot()                                                  // 40 used on its own counter: 20 left on the shards
	f.decide(f.b, "hot", 10, true)                                   // 10 more on the shards
	later := f.hotPair.pastHorizon(map[string]string{f.name: f.key}) // its own counter at rest
	f.refreshBoth(later, false)
	f.raw("cold, seeded", 10, 10)
	f.decide(f.a, "cold", 100, false)
	if f.total != 60 {
		t.Errorf("admitted %d in the window over two moves, want its limit 60", f.total)
	}
}
