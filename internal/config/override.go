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
// (or, for -listen and -grpc-listen, unix:/PATH), name a block the config has, and differ from the other listeners
// (unless its port is 0). The daemon applies the same Overrides after
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
	var seen []listenAt
	for _, l := range []listenAt{{"listen", c.Listen}, {"proxy.listen", proxyListen(c)}, {"grpc.listen", grpcListen(c)}} {
		if l.addr == "" {
			continue
		}
		for _, o := range seen {
			if listenClash(o.addr, l.addr) {
				errs = append(errs, fmt.Errorf("%s and %s would both listen on %s%s", o.key, l.key, l.addr, clashNote(o.addr, l.addr)))
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
