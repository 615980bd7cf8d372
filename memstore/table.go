package memstore

import "unsafe"

// entry is the state of a key whose algorithm keeps no log: 32 bytes,
// allocated in one block with a copy of its key right behind it (see
// newEntry), so a lookup finds the key and the state in the same place.
type entry struct {
	t, n, m int64
	idle    int64 // µs since the epoch from which the state is at rest
}

const entrySize = int(unsafe.Sizeof(entry{}))

// newEntry allocates a zero entry followed by a copy of ns+key:
// 32+len(ns)+len(key) bytes in one pointer-free block (48 bytes for a
// 16-byte key), where a map would hold a pointer to a 32-byte entry and a
// separately allocated key.
func newEntry(ns, key string) *entry {
	b := make([]byte, entrySize+len(ns)+len(key))
	copy(b[entrySize+copy(b[entrySize:], ns):], key)
	return (*entry)(unsafe.Pointer(unsafe.SliceData(b)))
}

// key returns the key stored behind e; n is its length, kept in the slot.
func (e *entry) key(n uint32) string {
	if n == 0 {
		return ""
	}
	return unsafe.String((*byte)(unsafe.Add(unsafe.Pointer(e), entrySize)), n)
}

// slot is one cell of a table: 16 bytes.
type slot struct {
	tag  uint32 // the high 32 bits of the key's hash; also its home cell
	klen uint32 // the key's length
	e    *entry // nil: empty
}

// table maps keys to entries with open addressing: linear probing from the
// cell the hash's high bits choose, deletion by shifting the probe run back
// (no tombstones), doubled when three quarters full. It holds 16 bytes per
// cell and needs no rehashing to grow, where a Go map of string to pointer
// holds 24 bytes per cell and hashes every key again.
type table struct {
	slots  []slot // len a power of two, or 0
	count  int
	cursor uint32 // where the incremental sweep and eviction look next
}

func (t *table) len() int { return t.count }

// find returns the index of the cell of ns+key, or -1. The key is kept
// as the concatenation but compared in two parts, so a namespaced lookup
// builds nothing.
func (t *table) find(h uint64, ns, key string) int {
	if t.count == 0 {
		return -1
	}
	tag := uint32(h >> 32)
	mask := uint32(len(t.slots) - 1)
	n := uint32(len(ns) + len(key))
	for i := tag & mask; ; i = (i + 1) & mask {
		sl := &t.slots[i]
		if sl.e == nil {
			return -1
		}
		if sl.tag == tag && sl.klen == n {
			if k := sl.e.key(n); k[:len(ns)] == ns && k[len(ns):] == key {
				return int(i)
			}
		}
	}
}

func (t *table) get(h uint64, ns, key string) *entry {
	if i := t.find(h, ns, key); i >= 0 {
		return t.slots[i].e
	}
	return nil
}

// add inserts a key of klen bytes, known to be absent, with e.
func (t *table) add(h uint64, klen int, e *entry) {
	if (t.count+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	t.place(slot{tag: uint32(h >> 32), klen: uint32(klen), e: e})
	t.count++
}

func (t *table) place(s slot) {
	mask := uint32(len(t.slots) - 1)
	i := s.tag & mask
	for t.slots[i].e != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = s
}

func (t *table) grow() {
	old := t.slots
	t.slots = make([]slot, max(8, 2*len(old)))
	for _, s := range old {
		if s.e != nil {
			t.place(s)
		}
	}
}

// shrink makes the table the smallest that holds its keys at most 3/8
// full, when that is a quarter of its size or less: from there it must
// take twice its keys to grow again.
func (t *table) shrink() {
	if t.count*8 > len(t.slots) || len(t.slots) <= 8 {
		return // more than an eighth full, or the smallest table
	}
	if t.count == 0 {
		t.slots, t.cursor = nil, 0
		return
	}
	size := 8
	for size*3 < t.count*8 {
		size <<= 1
	}
	if size*4 > len(t.slots) {
		return
	}
	old := t.slots
	t.slots, t.cursor = make([]slot, size), 0
	for _, s := range old {
		if s.e != nil {
			t.place(s)
		}
	}
}

// deleteAt empties cell i and shifts later cells of its probe run back, so
// that every key stays reachable from its home cell.
func (t *table) deleteAt(i uint32) {
	mask := uint32(len(t.slots) - 1)
	for j := i; ; {
		j = (j + 1) & mask
		s := t.slots[j]
		if s.e == nil {
			break
		}
		// s may move to i unless its home lies cyclically in (i, j].
		if home := s.tag & mask; (j-home)&mask < (j-i)&mask {
			continue
		}
		t.slots[i] = s
		i = j
	}
	t.slots[i] = slot{}
	t.count--
}
