package config

import (
	"encoding"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/yamlnode"
)

// wholeNumber matches the text of a whole number too long for YAML to
// resolve as an int (it resolves it as a float).
var wholeNumber = yamlnode.WholeNumber

// wellFormedDuration matches what time.ParseDuration reads, when it is not
// too large.
var wellFormedDuration = yamlnode.WellFormedDuration

// scalar returns the text of a scalar value with ${VAR} expanded, or false
// (after reporting) when it is not a scalar or expansion fails. want names
// the expected type in messages.
func (d *decoder) scalar(key string, n *yaml.Node, want string) (string, *yaml.Node, bool) {
	if n = d.Resolve(key, n); n == nil {
		return "", nil, false
	}
	if n.Kind != yaml.ScalarNode {
		d.Fail(n, key, "want %s, not %s", want, yamlnode.KindName(n))
		return "", nil, false
	}
	s, ok := d.expand(key, n)
	return s, n, ok
}

func (d *decoder) str(key string, v *yaml.Node) (string, bool) {
	s, n, ok := d.scalar(key, v, "a string")
	if !ok {
		return "", false
	}
	switch n.Tag {
	case "!!str", "!!int", "!!float":
		return s, true
	}
	d.Fail(n, key, "want a string, not %s", yamlnode.KindName(n))
	return "", false
}

// text decodes a scalar through its type's UnmarshalText.
func (d *decoder) text(key string, v *yaml.Node, dst encoding.TextUnmarshaler) bool {
	s, ok := d.str(key, v)
	if !ok {
		return false
	}
	if err := dst.UnmarshalText([]byte(s)); err != nil {
		d.Fail(v, key, "%v", err)
		return false
	}
	return true
}

func (d *decoder) int64(key string, v *yaml.Node) (int64, bool) {
	s, n, ok := d.scalar(key, v, "a whole number")
	if !ok {
		return 0, false
	}
	if n.Tag != "!!int" && !(n.Tag == "!!str" && strings.Contains(n.Value, "${")) && !wholeNumber.MatchString(s) {
		d.Fail(n, key, "want a whole number, not %s", yamlnode.KindName(n))
		return 0, false
	}
	digits := strings.TrimLeft(strings.ReplaceAll(s, "_", ""), "+-")
	if len(digits) > 1 && digits[0] == '0' && digits[1] >= '0' && digits[1] <= '9' {
		// yaml.v3 (YAML 1.1) and strconv read 010 as 8; YAML 1.2 as 10.
		dec := strings.TrimLeft(digits, "0")
		if dec == "" {
			dec = "0"
		}
		d.Fail(n, key, "%q: a leading 0 is ambiguous (octal in YAML 1.1, decimal in YAML 1.2): write %s, or 0o%s for octal", s, dec, dec)
		return 0, false
	}
	x, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 0, 64)
	switch {
	case err != nil && errors.Is(err, strconv.ErrRange) && strings.HasPrefix(s, "-"):
		d.Fail(n, key, "%s is too small (at least %d)", s, int64(math.MinInt64))
		return 0, false
	case err != nil && errors.Is(err, strconv.ErrRange):
		d.Fail(n, key, "%s is too large (at most %d)", s, int64(math.MaxInt64))
		return 0, false
	case err != nil:
		d.Fail(n, key, "%q is not a whole number", s)
		return 0, false
	}
	return x, true
}

func (d *decoder) bool(key string, v *yaml.Node) (bool, bool) {
	s, n, ok := d.scalar(key, v, "true or false")
	if !ok {
		return false, false
	}
	if n.Tag != "!!bool" && !(n.Tag == "!!str" && strings.Contains(n.Value, "${")) {
		d.Fail(n, key, "want true or false, not %s", yamlnode.KindName(n))
		return false, false
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		d.Fail(n, key, "want true or false, not %q", s)
		return false, false
	}
	return b, true
}

func (d *decoder) duration(key string, v *yaml.Node) (time.Duration, bool) {
	s, n, ok := d.scalar(key, v, "a duration such as 50ms")
	if !ok {
		return 0, false
	}
	if n.Tag != "!!str" {
		d.Fail(n, key, "want a duration with a unit, such as 50ms or 2s, not %s", yamlnode.KindName(n))
		return 0, false
	}
	x, err := time.ParseDuration(s)
	if err != nil && wellFormedDuration.MatchString(s) {
		// Well formed, so it failed for being larger than a Duration holds.
		d.Fail(n, key, "%q is too large (at most %v)", s, time.Duration(math.MaxInt64))
		return 0, false
	}
	if err != nil {
		d.Fail(n, key, "%q is not a duration (want a number and a unit, such as 50ms, 2s or 1m30s)", s)
		return 0, false
	}
	if x < 0 {
		d.Fail(n, key, "%v must not be negative", x)
		return 0, false
	}
	return x, true
}

// parsePrefix reads a CIDR, or a single address as a /32 or /128; an
// IPv4-mapped one (::ffff:10.0.0.0/104) as the IPv4 prefix it maps.
func parsePrefix(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR (such as 10.0.0.0/8) or an address", s)
		}
		a = a.Unmap().WithZone("")
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR such as 10.0.0.0/8 or fd00::/8", s)
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("%q has bits set past the prefix length; did you mean %s?", s, p.Masked())
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		// IPv4-mapped, as a dual-stack listener shows a peer: the IPv4
		// prefix it stands for, since addresses are compared unmapped.
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96), nil
	}
	return p, nil
}
