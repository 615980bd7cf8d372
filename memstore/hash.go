package memstore

import (
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"strings"
	"unsafe"
)

// hash returns the hash of (ns, key) and the form of ns stored with the
// key (see nsOf): the low bits pick the shard, the high 32 bits the cell
// in the shard's table. The key is hashed with the store's random secret
// or seed; the namespace, which the store's callers choose (a Limiter's
// name, algorithm and limit), is folded in by nsMix, a few loads instead
// of hashing it again on every decision, and cached by string identity
// (nsOf). Namespaces nsMix cannot tell apart only share probe runs:
// lookups compare the whole key.
func (s *Store) hash(ns, key string) (uint64, string) {
	// The key: up to 16 bytes as wyhash does (the way Go's runtime
	// hashes strings on CPUs without AES), two multiplications keyed with
	// the store's random secret; longer keys with maphash and the store's
	// seed. maphash.String costs more in calls than in hashing on a short
	// key, and a hot key's whole decision is a few hundred instructions.
	var h uint64
	if n := len(key); n <= 16 {
		p := unsafe.Pointer(unsafe.StringData(key))
		var a, b uint64
		switch {
		case n >= 8:
			a, b = load64p(p, 0), load64p(p, n-8)
		case n >= 4:
			a, b = uint64(load32p(p, 0)), uint64(load32p(p, n-4))
		case n > 0:
			a = uint64(*(*byte)(p))<<16 | uint64(*(*byte)(unsafe.Add(p, n>>1)))<<8 | uint64(*(*byte)(unsafe.Add(p, n-1)))
		}
		hi, lo := bits.Mul64(a^s.secret[1], b^s.secret[2])
		hi, lo = bits.Mul64(hi^lo, s.secret[0]^uint64(n))
		h = hi ^ lo
	} else {
		h = maphash.String(s.seed, key)
	}
	if ns == "" {
		return h, ""
	}
	p := unsafe.StringData(ns)
	if e := s.nsCache[(uintptr(unsafe.Pointer(p))>>4)%uintptr(len(s.nsCache))].Load(); e != nil && unsafe.StringData(e.ns) == p && len(e.ns) == len(ns) {
		return h ^ e.mix, e.stored
	}
	mix, stored := s.nsOf(ns)
	return h ^ mix, stored
}

// load64p and load32p read 8 and 4 bytes at p+i, little-endian (one load
// where the CPU allows unaligned ones).
func load64p(p unsafe.Pointer, i int) uint64 {
	return binary.LittleEndian.Uint64(unsafe.Slice((*byte)(unsafe.Add(p, i)), 8))
}

func load32p(p unsafe.Pointer, i int) uint32 {
	return binary.LittleEndian.Uint32(unsafe.Slice((*byte)(unsafe.Add(p, i)), 4))
}

// nsSeen is a namespace whose nsMix and stored form are known. It holds
// the string, so the memory it points to stays that namespace's for as
// long as it is cached.
type nsSeen struct {
	ns     string
	mix    uint64
	stored string
}

// nsOf returns nsMix(ns) and the form of ns the store keeps with each of
// its keys, from a small cache when ns is one of the strings the store
// has seen: a Limiter sends the same namespace string with every request,
// so comparing its address and length (the cache holds the string, so
// that address cannot be reused for other bytes) replaces hashing it on
// every decision. A cell is filled once, by the first namespace to land
// in it; others are looked up each time (no allocation on the hot path).
//
// The stored form is a 4-byte number the store gives the namespace (see
// intern), so that a key costs 4 bytes of namespace instead of its 12 to
// 40 or more: with a 12-byte key, a state block of 48 bytes instead of
// 64 or 80.
func (s *Store) nsOf(ns string) (uint64, string) {
	p := unsafe.StringData(ns)
	c := &s.nsCache[(uintptr(unsafe.Pointer(p))>>4)%uintptr(len(s.nsCache))]
	if e := c.Load(); e != nil {
		if unsafe.StringData(e.ns) == p && len(e.ns) == len(ns) {
			return e.mix, e.stored
		}
		return s.intern(ns)
	}
	m, stored := s.intern(ns)
	c.CompareAndSwap(nil, &nsSeen{ns: ns, mix: m, stored: stored})
	return m, stored
}

// maxInterned bounds the namespaces given a number: each holds its text
// (a Limiter's is tens of bytes) and about 100 bytes of map for the
// store's life. Namespaces past it, or longer than maxInternLen, are
// stored as they are, with each key: a program that makes a namespace per
// request (RequestLimit with ever new limits) grows nothing of its own.
const (
	maxInterned  = 1 << 16
	maxInternLen = 256
)

// interned is a namespace's nsMix and its stored form.
type interned struct {
	mix    uint64
	stored string
}

// intern returns ns's nsMix and stored form: a number the store gives it
// on first sight, written as 4 bytes (0xFF and 3 bytes of the number), or
// ns itself when ns is no longer than that, too long, or the store has
// numbered maxInterned namespaces already. Once a namespace has a form,
// it keeps it for the store's life (numbers are never reused), so every
// key of the namespace is stored and found the same way.
func (s *Store) intern(ns string) (uint64, string) {
	if len(ns) <= 4 || len(ns) > maxInternLen {
		return nsMix(ns), asText(ns)
	}
	if v, ok := s.nsIDs.Load(ns); ok {
		in := v.(*interned)
		return in.mix, in.stored
	}
	s.nsMu.Lock()
	defer s.nsMu.Unlock()
	if v, ok := s.nsIDs.Load(ns); ok {
		in := v.(*interned)
		return in.mix, in.stored
	}
	if s.nsCount >= maxInterned {
		return nsMix(ns), asText(ns)
	}
	s.nsCount++
	id := s.nsCount
	in := &interned{mix: nsMix(ns), stored: string([]byte{0xFF, byte(id >> 16), byte(id >> 8), byte(id)})}
	s.nsIDs.Store(strings.Clone(ns), in)
	return in.mix, in.stored
}

// textMark is the number 0, which no namespace is given, in the form of a
// numbered namespace: the front of a namespace or key kept as its text
// whose first byte is 0xFF, as a numbered namespace's is (see asText).
const textMark = "\xff\x00\x00\x00"

// asText is the stored form of a namespace kept as its text: itself, or,
// when it starts with 0xFF, itself behind textMark, so that no text (a
// namespace of 4 bytes such as "\xff\x00\x00\x01", or one's first bytes)
// reads as a numbered namespace's form and meets its keys. A namespace
// with a key is one text, as Request.Namespace says, so "\xff" with key
// "ab" and "" with key "\xffab" still meet (see logKey).
func asText(ns string) string {
	if ns != "" && ns[0] == 0xFF {
		return textMark + ns
	}
	return ns
}

// nsMix hashes ns by its length and its first, middle and last 8 bytes,
// where the name and the limit of a Limiter's namespace sit.
func nsMix(ns string) uint64 {
	n := len(ns)
	var a, b, c uint64
	if n >= 8 {
		a, b, c = load64(ns, 0), load64(ns, n/2-4), load64(ns, n-8)
	} else {
		for i := 0; i < n; i++ {
			a = a<<8 | uint64(ns[i])
		}
	}
	x := a*0x9e3779b97f4a7c15 ^ bits.RotateLeft64(b*0xc2b2ae3d27d4eb4f, 23) ^ bits.RotateLeft64(c*0x165667b19e3779f9, 47) ^ uint64(n)
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	return x | 1 // never 0, so a namespace always moves the hash
}

func load64(s string, i int) uint64 {
	return binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(s[i:]), 8))
}
