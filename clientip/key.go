package clientip

import (
	"net/netip"
	"strconv"
)

// Default prefix lengths of a client address key: an IPv4 client is its
// address, an IPv6 client its /64, because one IPv6 host usually holds a
// whole /64 (2^64 addresses) and could otherwise rotate through it to
// escape a per-address limit.
const (
	DefaultIPv4Prefix = 32
	DefaultIPv6Prefix = 64
)

// Prefixes says how much of a client address a key counts. Zero fields
// take the defaults (DefaultIPv4Prefix, DefaultIPv6Prefix).
type Prefixes struct {
	IPv4 int // 1–32
	IPv6 int // 1–128
}

// Bits returns the prefix length p applies to a (after unmapping an
// IPv4-mapped IPv6 address).
func (p Prefixes) Bits(a netip.Addr) int {
	if a.Unmap().Is4() {
		if p.IPv4 <= 0 || p.IPv4 > 32 {
			return DefaultIPv4Prefix
		}
		return p.IPv4
	}
	if p.IPv6 <= 0 || p.IPv6 > 128 {
		return DefaultIPv6Prefix
	}
	return p.IPv6
}

// AppendKey appends the key of client address a to b: the address itself
// when the prefix covers all of it ("192.0.2.1", "2001:db8::1" at /128),
// else the masked prefix ("2001:db8:1:2::/64", "192.0.2.0/24"). The zone
// is dropped and an IPv4-mapped IPv6 address counts as IPv4, so
// ::ffff:192.0.2.1 and 192.0.2.1 share one key. a must be valid.
func (p Prefixes) AppendKey(b []byte, a netip.Addr) []byte {
	a = a.Unmap().WithZone("")
	bits := p.Bits(a)
	if bits == a.BitLen() {
		return a.AppendTo(b)
	}
	pfx, _ := a.Prefix(bits) // bits is within range for a's family
	b = pfx.Addr().AppendTo(b)
	b = append(b, '/')
	return strconv.AppendInt(b, int64(bits), 10)
}

// Key returns AppendKey's key as a string, or "" for an invalid address.
func (p Prefixes) Key(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	var buf [48]byte
	return string(p.AppendKey(buf[:0], a))
}
