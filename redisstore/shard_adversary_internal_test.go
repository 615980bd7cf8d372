package redisstore

import (
	"hash/maphash"
	"testing"
)

// No key a client can send puts two shards of a key on one master of an
// evenly split 3-master Cluster (the map redis-cli --cluster create makes:
// 0–5460, 5461–10922, 10923–16383), for 2 and 3 shards. The proof is
// exhaustive: a shard's slot is the CRC16 of its hash tag, key + "#" +
// tag, and CRC16 (no initial value, no final xor) is linear, so the slots
// of all the shards of a key depend on the key only through the CRC16
// register after it; three free bytes at the end of a key reach all 65,536
// values of that register (the test checks they do), so these keys stand
// for every key of any length (an escaped key included). Nor does the search for a slot ever
// give up (after 64 tries it would take any slot).
func TestShardPlacementNoAdversary(t *testing.T) {
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
	s := &Store{opts: Options{Cluster: true, Prefix: DefaultPrefix}}
	s.seed = maphash.MakeSeed()
	s.slotNodes.Store(m)
	worst := 0
	for n := 2; n <= 3; n++ {
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
			nodes := map[uint16]bool{}
			for _, c := range s.shardTags(k, n).keys {
				nodes[m.of[slot(s.Key(c))]] = true
				worst = max(worst, len(c)-len(k))
			}
			if len(nodes) != n {
				t.Fatalf("%d shards of %q on %d masters, want %d", n, k, len(nodes), n)
			}
		}
		if covered != 1<<16 {
			t.Fatalf("keys reached %d CRC16 registers of 65536", covered)
		}
	}
	if worst > len("#63") {
		t.Errorf("a shard's tag took %d characters: the search went past 64 tries", worst-1)
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
