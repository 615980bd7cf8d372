package config

import (
	"net"
	"strings"
	"testing"
)

// TestListenersOnOnePort: two listeners that cannot both bind (one on a
// wildcard address and the other on the same port, or one address
// written two ways) are refused by Parse, naming the second key and the
// first, as `sluice serve` would fail to bind the second at startup,
// after check-config said ok. Listeners that can share a port (two
// loopback addresses, IPv4 and IPv6 loopback) are taken.
func TestListenersOnOnePort(t *testing.T) {
	dir := t.TempDir()
	const proxy = "proxy: {listen: %s, upstream: http://127.0.0.1:9000}\n"
	for _, tc := range []struct {
		name, listen, grpc, proxy string
		want                      []string // in the error, each; none: valid
	}{
		{"wildcard then loopback", ":7311", "127.0.0.1:0", "127.0.0.1:7311", []string{"u.yaml:", "proxy.listen", "listen", ":7311", "every address"}},
		{"loopback then wildcard", "127.0.0.1:7311", "0.0.0.0:7311", "", []string{"grpc.listen", "listen", "every address"}},
		{"IPv6 wildcard", "[::1]:7311", "127.0.0.1:0", "[::]:7311", []string{"proxy.listen", "listen"}},
		{"IPv4 wildcard, IPv6 address", "0.0.0.0:7311", "[::1]:7311", "", []string{"grpc.listen", "listen"}},
		{"mapped IPv4", "127.0.0.1:7311", "[::ffff:127.0.0.1]:7311", "", []string{"grpc.listen", "listen"}},
		{"port with a zero", "127.0.0.1:7311", "127.0.0.1:07311", "", []string{"grpc.listen", "listen"}},
		{"third clashes with the first", ":7311", "127.0.0.1:7311", "127.0.0.1:7312", []string{"grpc.listen", "listen"}},
		{"localhost, then its address", "localhost:7311", "127.0.0.1:7311", "", []string{"grpc.listen", "listen", "localhost is 127.0.0.1"}},
		{"its address, then LOCALHOST", "127.0.0.1:7311", "LOCALHOST:7311", "", []string{"grpc.listen", "listen", "localhost is 127.0.0.1"}},
		{"localhost, then mapped", "localhost:7311", "[::ffff:127.0.0.1]:7311", "", []string{"grpc.listen", "listen"}},
		{"localhost twice, cased apart", "localhost:7311", "127.0.0.1:0", "Localhost:7311", []string{"proxy.listen", "listen"}},
		{"localhost and IPv6 loopback", "localhost:7311", "[::1]:7311", "", nil},
		{"two loopbacks", "127.0.0.1:7311", "127.0.0.2:7311", "", nil},
		{"IPv4 and IPv6 loopback", "127.0.0.1:7311", "[::1]:7311", "", nil},
		{"other ports", ":7311", ":7312", "127.0.0.1:7313", nil},
		{"port 0 twice", ":0", "127.0.0.1:0", ":0", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			extra := ""
			if tc.proxy != "" {
				extra = strings.Replace(proxy, "%s", `"`+tc.proxy+`"`, 1)
			}
			y := unixConfig(t, dir, `"`+tc.listen+`"`, `"`+tc.grpc+`"`, extra)
			_, err := Parse("u.yaml", []byte(y))
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Parse refused listeners that can share a port:\n%s\n%v", y, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Parse took listeners that cannot both bind:\n%s", y)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestListenersOnOnePortBind backs TestListenersOnOnePort's cases with
// the system's word: each pair it refuses fails to bind as the daemon
// binds it, each pair it takes binds.
func TestListenersOnOnePortBind(t *testing.T) {
	for _, tc := range []struct {
		a, b  string
		clash bool
	}{
		{"", "127.0.0.1", true},
		{"0.0.0.0", "::1", true},
		{"::", "127.0.0.1", true},
		{"127.0.0.1", "::ffff:127.0.0.1", true},
		{"127.0.0.1", "0.0.0.0", true},
		{"127.0.0.1", "127.0.0.2", false},
		{"127.0.0.1", "::1", false},
		{"localhost", "127.0.0.1", true},
		{"127.0.0.1", "LOCALHOST", true},
		{"localhost", "::1", false},
	} {
		first, err := net.Listen("tcp", net.JoinHostPort(tc.a, "0"))
		if err != nil {
			t.Logf("%q: %v: skipped (no such address here)", tc.a, err)
			continue
		}
		_, port, _ := net.SplitHostPort(first.Addr().String())
		a, b := net.JoinHostPort(tc.a, port), net.JoinHostPort(tc.b, port)
		if got := listenClash(a, b); got != tc.clash {
			t.Errorf("listenClash(%q, %q) = %v, want %v", a, b, got, tc.clash)
		}
		second, err := net.Listen("tcp", b)
		if second != nil {
			second.Close()
		} else if !tc.clash && strings.Contains(err.Error(), "address already in use") {
			t.Errorf("%s after %s: %v, want both bound", b, a, err)
		}
		if tc.clash && err == nil {
			t.Errorf("%s after %s bound: the case is wrong", b, a)
		}
		first.Close()
	}
}

// TestOverridesOnOnePort: -listen, -proxy-listen and -grpc-listen are
// held to the same rule, and a clash names the flag with its address and
// the config's key with its line.
func TestOverridesOnOnePort(t *testing.T) {
	dir := t.TempDir()
	c, err := Parse("o.yaml", []byte(unixConfig(t, dir, "127.0.0.1:7311", "127.0.0.1:0", "")))
	if err != nil {
		t.Fatal(err)
	}
	err = Overrides{GRPCListen: ":7311"}.Apply(c)
	if err == nil || !strings.Contains(err.Error(), `listen (o.yaml:1) and -grpc-listen ":7311" would both listen`) {
		t.Errorf("Apply(-grpc-listen :7311) over listen 127.0.0.1:7311 = %v, want the clash named", err)
	}
	if c, err = Parse("o.yaml", []byte(unixConfig(t, dir, "127.0.0.1:7311", "127.0.0.1:0", ""))); err != nil {
		t.Fatal(err)
	}
	err = Overrides{GRPCListen: "localhost:7311"}.Apply(c)
	if err == nil || !strings.Contains(err.Error(), `listen (o.yaml:1) and -grpc-listen "localhost:7311" would both listen on localhost:7311 (the same address and port: localhost is 127.0.0.1`) {
		t.Errorf("Apply(-grpc-listen localhost:7311) over listen 127.0.0.1:7311 = %v, want the clash named", err)
	}
	if c, err = Parse("o.yaml", []byte("proxy: {listen: 127.0.0.1:0, upstream: http://127.0.0.1:9000}\n")); err != nil {
		t.Fatal(err)
	}
	err = Overrides{ProxyListen: "LOCALHOST:" + strings.TrimPrefix(DefaultListen, "127.0.0.1:")}.Apply(c)
	if err == nil || !strings.Contains(err.Error(), "listen (its default, "+DefaultListen+") and -proxy-listen") {
		t.Errorf("Apply(-proxy-listen) on the default listen's port = %v, want the clash named, with the default", err)
	}
}
