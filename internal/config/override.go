package config

import (
	"errors"
	"fmt"
)

// Overrides are listen addresses given on the command line (sluice serve
// -listen, -proxy-listen, -grpc-listen); "" keeps the config's. Port 0
// picks a free port.
type Overrides struct {
	Listen      string // replaces listen
	ProxyListen string // replaces proxy.listen; needs a proxy block
	GRPCListen  string // replaces grpc.listen; needs a grpc block
}

// Apply sets o's addresses in c and checks them: each must be host:port
// (or, for -listen and -grpc-listen, unix:/PATH), name a block the
// config has, and not clash with the other listeners, as Parse checks
// the config's own (listenClash): a clash names the flag with its
// address, and the config's key with its line. serve and check-config
// apply them after Parse; the daemon applies the same Overrides after
// every reload, so a reload does not see them as a change of address.
func (o Overrides) Apply(c *Config) error {
	var errs []error
	set := func(flag, addr string, dst *string, unixOK bool) {
		if addr == "" {
			return
		}
		if msg := listenProblem(addr, unixOK); msg != "" {
			errs = append(errs, fmt.Errorf("%s %q: %s", flag, addr, msg))
			return
		}
		*dst = addr
	}
	set("-listen", o.Listen, &c.Listen, true)
	if o.ProxyListen != "" && c.Proxy == nil {
		errs = append(errs, errors.New("-proxy-listen: the config has no proxy block (a proxy needs proxy.upstream too)"))
	} else if c.Proxy != nil {
		set("-proxy-listen", o.ProxyListen, &c.Proxy.Listen, false)
	}
	if o.GRPCListen != "" && c.GRPC == nil {
		errs = append(errs, errors.New("-grpc-listen: the config has no grpc block (the gRPC service needs grpc.config too)"))
	} else if c.GRPC != nil {
		set("-grpc-listen", o.GRPCListen, &c.GRPC.Listen, true)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// The clash check of Parse again, on the addresses serve binds: an
	// override may clash with an address of the config.
	flags := map[string]string{"listen": "-listen", "proxy.listen": "-proxy-listen", "grpc.listen": "-grpc-listen"}
	given := map[string]bool{"listen": o.Listen != "", "proxy.listen": o.ProxyListen != "", "grpc.listen": o.GRPCListen != ""}
	// named names the listener of key at addr: its flag when set, or its
	// key and line in the file.
	named := func(key, addr string) string {
		switch {
		case given[key]:
			return fmt.Sprintf("%s %q", flags[key], addr)
		case c.Has(key):
			return fmt.Sprintf("%s (%s:%d)", key, c.File, c.Line(key))
		}
		return key + " (its default, " + addr + ")"
	}
	var seen []listenAt
	for _, l := range []listenAt{{"listen", c.Listen}, {"proxy.listen", proxyListen(c)}, {"grpc.listen", grpcListen(c)}} {
		if l.addr == "" {
			continue
		}
		for _, o := range seen {
			if listenClash(o.addr, l.addr) {
				errs = append(errs, fmt.Errorf("%s and %s would both listen on %s%s", named(o.key, o.addr), named(l.key, l.addr), l.addr, clashNote(o.addr, l.addr)))
				break
			}
		}
		seen = append(seen, l)
	}
	return errors.Join(errs...)
}

func proxyListen(c *Config) string {
	if c.Proxy == nil {
		return ""
	}
	return c.Proxy.Listen
}

func grpcListen(c *Config) string {
	if c.GRPC == nil {
		return ""
	}
	return c.GRPC.Listen
}
