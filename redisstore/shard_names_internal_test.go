package redisstore

import (
	"fmt"
	"hash/fnv"
	"hash/maphash"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// evenMap3 is the slot map redis-cli --cluster create makes for 3
// masters: 0–5460, 5461–10922, 10923–16383.
func evenMap3() *slotMap {
	m := &slotMap{count: 3}
	for sl := range m.of {
		switch {
		case sl <= 5460:
			m.of[sl] = 0
		case sl <= 10922:
			m.of[sl] = 1
		default:
			m.of[sl] = 2
		}
	}
	return m
}

// tagStore is a Store that only names shards: Cluster or not, with slot
// map m (nil: unknown, and not read again during the test).
func tagStore(cluster bool, m *slotMap) *Store {
	s := &Store{opts: Options{Cluster: cluster, Prefix: DefaultPrefix}}
	s.seed = maphash.MakeSeed()
	if m != nil {
		s.slotNodes.Store(m)
	}
	s.slotsRead.Store(time.Now().Add(time.Hour).UnixNano()) // no background read
	return s
}

// The names of shards up to one per master are those every earlier
// version gave them: a rolling upgrade then counts a key sharded over at
// most as many shards as masters (shards: auto always is) on the same
// Redis keys in old and new instances. The digests are of the shard keys
// of 1,000 keys over 2 and 3 shards, as the versions up to this one name
// them, on the evenly split 3-master map, with the map unknown, and
// without Cluster.
func TestShardNamesStableAcrossVersions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cluster bool
		m       *slotMap
		want    uint64
	}{
		{"cluster, 3 masters", true, evenMap3(), 0x8f0b543cffcd577b},
		{"cluster, map unknown", true, nil, 0x5d41e745309b4b9b},
		{"one server", false, nil, 0x5d41e745309b4b9b},
	} {
		s := tagStore(tc.cluster, tc.m)
		h := fnv.New64a()
		for n := 2; n <= 3; n++ {
			for i := range 1000 {
				fmt.Fprintln(h, strings.Join(s.shardTags("rule|0123abcd|"+strconv.Itoa(i), n).keys, " "))
			}
		}
		if got := h.Sum64(); got != tc.want {
			t.Errorf("%s: shard keys' digest %#x, want %#x: shards are named otherwise than by earlier versions", tc.name, got, tc.want)
		}
	}
	// Examples, readable: the first three shards of "hot" and of "x"
	// skip tags whose slot is on a master already used.
	s := tagStore(true, evenMap3())
	for k, want := range map[string]string{"hot": "hot#0 hot#1 hot#3", "x": "x#0 x#2 x#3", "a}b\\c": "a}b\\c#0 a}b\\c#1 a}b\\c#2"} {
		if got := strings.Join(s.ShardKeys(k, 3), " "); got != want {
			t.Errorf("ShardKeys(%q, 3) = %q, want %q", k, got, want)
		}
	}
}

// Shards per master differ by at most one, for any shard count, on an
// even map and on an uneven one of 4 masters (one holding 1,000 slots).
func TestShardsRoundRobinOverMasters(t *testing.T) {
	uneven := &slotMap{count: 4}
	for sl := range uneven.of {
		switch {
		case sl < 1000:
			uneven.of[sl] = 3
		default:
			uneven.of[sl] = uint16(sl % 3)
		}
	}
	for _, m := range []*slotMap{evenMap3(), uneven} {
		s := tagStore(true, m)
		for n := 2; n <= 13; n++ {
			for i := range 300 {
				k := "rule|0123abcd|" + strconv.Itoa(i)
				per := make([]int, m.count)
				for _, c := range s.shardTags(k, n).keys {
					per[m.of[slot(s.Key(c))]]++
				}
				if slices.Max(per)-slices.Min(per) > 1 {
					t.Fatalf("%d masters: ShardKeys(%q, %d) = %v shards per master, want counts within one of each other", m.count, k, n, per)
				}
			}
		}
	}
}

// The bound docs/redis.md gives for a rolling upgrade across round-robin
// placement: the shards past the first M (those it may name anew) hold at
// most (N − M)/N of the limit, rounded up, for the rate and the burst of
// every algorithm (the remainders of the split go to the first shards).
func TestShardsPastMastersShare(t *testing.T) {
	for _, a := range []sluice.Algorithm{sluice.TokenBucket, sluice.FixedWindow, sluice.LeakyBucket} {
		for rate := int64(1); rate <= 120; rate++ {
			l := sluice.PerMinute(rate).WithBurst(rate + rate/3)
			if !a.TakesBurst() {
				l.Burst = 0 // a window takes no burst
			}
			n0 := shardCount(a, l, 64)
			for n := 2; n <= n0; n++ {
				for m := 1; m < n; m++ {
					var r, b int64
					for i := m; i < n; i++ {
						s := ShardLimit(a, l, n, i)
						r += s.Rate
						b += s.BurstOrRate()
					}
					ceil := func(v int64) int64 { return (int64(n-m)*v + int64(n) - 1) / int64(n) }
					if r > ceil(l.Rate) || b > ceil(l.BurstOrRate()) {
						t.Fatalf("%v %+v over %d shards: the shards past %d hold rate %d, burst %d; want at most %d and %d",
							a, l, n, m, r, b, ceil(l.Rate), ceil(l.BurstOrRate()))
					}
				}
			}
		}
	}
}
