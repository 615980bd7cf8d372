package redisstore

import (
	"hash/maphash"
	"slices"
	"testing"
)

// No key a client can send puts two shards of a key on one master of an
// evenly split 3-master Cluster (the map redis-cli --cluster create makes:
// 0–5460, 5461–10922, 10923–16383), for 2 and 3 shards, nor, for 4 to 6
// shards, more shards on one master than on another plus one. The proof is
// exhaustive: a shard's slot is the CRC16 of its hash tag, key + "#" +
// tag, and CRC16 (no initial value, no final xor) is linear, so the slots
// of all the shards of a key depend on the key only through the CRC16
// register after it; three free bytes at the end of a key reach all 65,536
// values of that register (the test checks they do), so these keys stand
// for every key of any length (an escaped key included). Nor does the search for a slot ever
// give up (after shardTries tries it would take any slot); it never tries
// a hundred tags.
func TestShardPlacementNoAdversary(t *testing.T) {
	m := evenMap3()
	s := &Store{opts: Options{Cluster: true, Prefix: DefaultPrefix}}
	s.seed = maphash.MakeSeed()
	s.slotNodes.Store(m)
	worst := 0
	for n := 2; n <= 6; n++ {
		var seen [1 << 16]bool
		covered := 0
		for v := 0; v < 1<<24 && covered < 1<<16; v++ {
			b := []byte{byte(v >> 16), byte(v >> 8), byte(v)}
			k := "rule|0123abcd|" + string(b)
			if s.Key(k) != DefaultPrefix+"{"+k+"}" {
				continue // escaped: keys without '}' and '\' reach every register
			}
			r := crc16(k)
			if seen[r] {
				continue
			}
			seen[r] = true
			covered++
			per := make([]int, m.count)
			slots := map[uint16]bool{}
			for _, c := range s.shardTags(k, n).keys {
				sl := slot(s.Key(c))
				slots[sl] = true
				per[m.of[sl]]++
				worst = max(worst, len(c)-len(k))
			}
			if len(slots) != n || slices.Max(per)-slices.Min(per) > 1 {
				t.Fatalf("%d shards of %q in %d slots, %v per master; want %d slots, counts within one of each other", n, k, len(slots), per, n)
			}
		}
		if covered != 1<<16 {
			t.Fatalf("keys reached %d CRC16 registers of 65536", covered)
		}
	}
	if worst > len("#63") {
		t.Errorf("a shard's tag took %d characters: the search tried a hundred tags or more", worst-1)
	}
}

// crc16 is the CRC16 register after s, as slot computes it, all 16 bits.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
