package config

import (
	"strings"
	"testing"
)

func TestOverrides(t *testing.T) {
	const withProxy = "listen: 127.0.0.1:8080\nproxy: {listen: 127.0.0.1:8000, upstream: http://127.0.0.1:9000}\n"
	for _, tc := range []struct {
		name, yaml string
		o          Overrides
		listen     string // want, when no error
		proxy      string
		err        string // want in the error
	}{
		{"none", withProxy, Overrides{}, "127.0.0.1:8080", "127.0.0.1:8000", ""},
		{"listen", withProxy, Overrides{Listen: "127.0.0.1:0"}, "127.0.0.1:0", "127.0.0.1:8000", ""},
		{"both to port 0", withProxy, Overrides{Listen: "127.0.0.1:0", ProxyListen: "127.0.0.1:0"}, "127.0.0.1:0", "127.0.0.1:0", ""},
		{"bad address", withProxy, Overrides{Listen: "nowhere"}, "", "", `-listen "nowhere": want host:port`},
		{"no proxy block", "listen: 127.0.0.1:8080\n", Overrides{ProxyListen: "127.0.0.1:0"}, "", "", "-proxy-listen: the config has no proxy block"},
		{"no grpc block", "listen: 127.0.0.1:8080\n", Overrides{GRPCListen: "127.0.0.1:0"}, "", "", "-grpc-listen: the config has no grpc block"},
		{"clash", withProxy, Overrides{Listen: "127.0.0.1:8000"}, "", "", `-listen "127.0.0.1:8000" and proxy.listen (o.yaml:2) would both listen on 127.0.0.1:8000`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("o.yaml", []byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			err = tc.o.Apply(c)
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("Apply(%+v) = %v, want an error containing %q", tc.o, err, tc.err)
				}
			case err != nil:
				t.Errorf("Apply(%+v) = %v", tc.o, err)
			case c.Listen != tc.listen || c.Proxy.Listen != tc.proxy:
				t.Errorf("Apply(%+v): listen %q proxy %q, want %q %q", tc.o, c.Listen, c.Proxy.Listen, tc.listen, tc.proxy)
			}
		})
	}
}
