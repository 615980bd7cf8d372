package config

import (
	"strconv"

	"github.com/sluicehq/sluice/clientip"
)

// ClientIPConfig says whose forwarding headers to believe, and how much of
// a client's address an ip key part counts.
type ClientIPConfig struct {
	// TrustedProxies are the CIDRs (or single addresses) of proxies whose
	// X-Forwarded-For / Forwarded headers are read, and "unix:" for the
	// peers of a Unix-socket listener. Empty: nobody's.
	TrustedProxies []TrustedProxy `yaml:"trusted_proxies"`
	// IPv6Prefix is the prefix length an ip key part counts of an IPv6
	// client. Default clientip.DefaultIPv6Prefix (64: its /64, since one
	// host usually holds a whole /64).
	IPv6Prefix int `yaml:"ipv6_prefix"`
	// IPv4Prefix is the same for IPv4 clients. Default
	// clientip.DefaultIPv4Prefix (32: the address).
	IPv4Prefix int `yaml:"ipv4_prefix"`
}

func (c *ClientIPConfig) defaults() {
	setDefault(&c.IPv6Prefix, clientip.DefaultIPv6Prefix)
	setDefault(&c.IPv4Prefix, clientip.DefaultIPv4Prefix)
}

// Prefixes returns how much of a client address an ip key counts.
func (c *ClientIPConfig) Prefixes() clientip.Prefixes {
	return clientip.Prefixes{IPv4: c.IPv4Prefix, IPv6: c.IPv6Prefix}
}

// Resolver returns the resolver of client addresses trusted_proxies
// makes.
func (c *ClientIPConfig) Resolver() clientip.Resolver {
	var r clientip.Resolver
	for _, p := range c.TrustedProxies {
		if p.Unix {
			r.TrustUnix = true
		} else {
			r.Trusted = append(r.Trusted, p.Prefix)
		}
	}
	return r
}

func (c *ClientIPConfig) check(ck *checker) {
	for i, p := range c.TrustedProxies {
		if !p.Unix && !p.Prefix.IsValid() {
			ck.fail("client_ip.trusted_proxies["+strconv.Itoa(i)+"]", "invalid prefix")
		}
	}
	if n := c.IPv6Prefix; n < 1 || n > 128 {
		ck.fail("client_ip.ipv6_prefix", "%d must be between 1 and 128", n)
	}
	if n := c.IPv4Prefix; n < 1 || n > 32 {
		ck.fail("client_ip.ipv4_prefix", "%d must be between 1 and 32", n)
	}
}
