package config

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// unixConfig writes a descriptor file in dir and returns a config with
// the given listen and grpc.listen, and extra appended.
func unixConfig(t *testing.T, dir, listen, grpcListen, extra string) string {
	t.Helper()
	desc := filepath.Join(dir, "ratelimit.yaml")
	if err := os.WriteFile(desc, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return "listen: " + listen + "\ngrpc:\n  listen: " + grpcListen + "\n  config: [" + desc + "]\n" + extra
}

func TestUnixListen(t *testing.T) {
	dir := t.TempDir()
	c, err := Parse("u.yaml", []byte(unixConfig(t, dir, "unix:"+dir+"/api.sock", "unix:"+dir+"/grpc.sock", "")))
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := UnixPath(c.Listen); !ok || p != dir+"/api.sock" {
		t.Errorf("UnixPath(%q) = %q, %v; want %q, true", c.Listen, p, ok, dir+"/api.sock")
	}
	if p, ok := UnixPath(c.GRPC.Listen); !ok || p != dir+"/grpc.sock" {
		t.Errorf("UnixPath(%q) = %q, %v", c.GRPC.Listen, p, ok)
	}
	if _, ok := UnixPath("127.0.0.1:8080"); ok {
		t.Error("UnixPath took a TCP address for a Unix socket")
	}
}

func TestUnixListenProblems(t *testing.T) {
	dir := t.TempDir()
	long := "unix:" + dir + "/" + strings.Repeat("s", MaxUnixPath+1-len(dir)-1) + ".sock"
	for _, tc := range []struct {
		name, listen, grpc, extra string
		want                      []string // in the error, each
	}{
		{"empty path", `"unix:"`, "127.0.0.1:0", "", []string{"listen", "no socket path"}},
		{"relative", "unix:run/api.sock", "127.0.0.1:0", "", []string{"listen", "not absolute"}},
		{"grpc relative", "127.0.0.1:0", "unix:grpc.sock", "", []string{"grpc.listen", "not absolute"}},
		{"too long", long, "127.0.0.1:0", "", []string{"listen", "longer than", "107"}},
		{"no directory", "unix:" + dir + "/nope/api.sock", "127.0.0.1:0", "", []string{"listen", "nope", "no such file or directory"}},
		{"directory is a file", "unix:" + dir + "/ratelimit.yaml/api.sock", "127.0.0.1:0", "", []string{"listen", "not a directory"}},
		{"path is a file", "unix:" + dir + "/ratelimit.yaml", "127.0.0.1:0", "", []string{"listen", dir + "/ratelimit.yaml is not a socket (a regular file)", "remove it, or pick another path"}},
		{"path is a directory", "unix:" + dir, "127.0.0.1:0", "", []string{"listen", "is not a socket (a directory)"}},
		{"grpc path is a file", "127.0.0.1:0", "unix:" + dir + "/ratelimit.yaml", "", []string{"grpc.listen", "is not a socket (a regular file)"}},
		{"twice", "unix:" + dir + "/a.sock", "unix:" + dir + "/a.sock", "", []string{"grpc.listen", "already used by listen"}},
		{"twice, spelled apart", "unix:" + dir + "/a.sock", "unix:" + dir + "//./a.sock", "", []string{"grpc.listen", "already used by listen"}},
		{"proxy", "127.0.0.1:0", "127.0.0.1:0", "proxy: {listen: unix:" + dir + "/p.sock, upstream: http://127.0.0.1:9000}\n",
			[]string{"proxy.listen", "TCP only"}},
		{"trusted unix path", "127.0.0.1:0", "127.0.0.1:0", "client_ip: {trusted_proxies: [unix:/run/x.sock]}\n",
			[]string{"client_ip.trusted_proxies[0]", `"unix:"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			y := unixConfig(t, dir, tc.listen, tc.grpc, tc.extra)
			_, err := Parse("u.yaml", []byte(y))
			if err == nil {
				t.Fatalf("Parse took\n%s", y)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestUnixListenStaleSocket: a socket left at the path (by a daemon
// killed before it removed it) is taken: serve replaces it.
func TestUnixListenStaleSocket(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "api.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("no stale socket at %s: %v", path, err)
	}
	if _, err := Parse("u.yaml", []byte(unixConfig(t, dir, "unix:"+path, "127.0.0.1:0", ""))); err != nil {
		t.Errorf("Parse refused a stale socket at the path: %v", err)
	}
}

func TestTrustedProxiesUnix(t *testing.T) {
	// unix: unquoted is, to YAML, a mapping {unix: null}: taken too,
	// as nginx's set_real_ip_from unix: is written so.
	for _, y := range []string{
		"client_ip: {trusted_proxies: [10.0.0.0/8, \"unix:\"]}\n",
		"client_ip: {trusted_proxies: [10.0.0.0/8, unix:]}\n",
		"client_ip:\n  trusted_proxies:\n    - 10.0.0.0/8\n    - unix:\n",
	} {
		c, err := Parse("u.yaml", []byte(y))
		if err != nil {
			t.Fatalf("%s: %v", y, err)
		}
		r := c.ClientIP.Resolver()
		if !r.TrustUnix || len(r.Trusted) != 1 || r.Trusted[0].String() != "10.0.0.0/8" {
			t.Errorf("%s: Resolver() = %+v, want 10.0.0.0/8 and the Unix peers trusted", y, r)
		}
	}
	if _, err := Parse("u.yaml", []byte("client_ip: {trusted_proxies: [{unix: 1}]}\n")); err == nil || !strings.Contains(err.Error(), "client_ip.trusted_proxies[0]") {
		t.Errorf("a mapping other than unix: was taken, or its error names no key: %v", err)
	}
	c, err := Parse("u.yaml", []byte("client_ip: {trusted_proxies: [10.0.0.0/8]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.ClientIP.Resolver().TrustUnix {
		t.Error("the Unix peers are trusted without unix: in trusted_proxies")
	}
}

func TestUnixOverrides(t *testing.T) {
	dir := t.TempDir()
	y := unixConfig(t, dir, "127.0.0.1:0", "127.0.0.1:0", "")
	for _, tc := range []struct {
		name string
		o    Overrides
		err  string
	}{
		{"listen", Overrides{Listen: "unix:" + dir + "/a.sock", GRPCListen: "unix:" + dir + "/g.sock"}, ""},
		{"relative", Overrides{Listen: "unix:a.sock"}, "-listen \"unix:a.sock\": the socket path a.sock is not absolute"},
		{"proxy", Overrides{ProxyListen: "unix:" + dir + "/p.sock"}, "-proxy-listen"},
		{"clash", Overrides{Listen: "unix:" + dir + "/a.sock", GRPCListen: "unix:" + dir + "/a.sock"}, "would both listen on unix:"},
		{"tls", Overrides{Listen: "unix:" + dir + "/a.sock", GRPCListen: "unix:" + dir + "/g.sock"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			y := y
			if tc.name == "tls" {
				y = withUnixTLS(y)
			}
			c, err := Parse("o.yaml", []byte(y))
			if err != nil {
				t.Fatal(err)
			}
			err = tc.o.Apply(c)
			if tc.err == "" {
				if err != nil || c.Listen != tc.o.Listen || c.GRPC.Listen != tc.o.GRPCListen {
					t.Errorf("Apply = %v; listen %q, grpc.listen %q", err, c.Listen, c.GRPC.Listen)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Apply = %v, want an error containing %q", err, tc.err)
			}
		})
	}
}

// A rule keyed by ip on a Unix-socket listener whose peers are not
// trusted counts every client of the socket as one: check-config says so.
func TestUnixWarnings(t *testing.T) {
	dir := t.TempDir()
	rule := "rules:\n  - {name: per-ip, key: [ip], rate: 10/s}\n"
	for _, tc := range []struct {
		name, yaml string
		warn       bool
	}{
		{"untrusted", "listen: unix:" + dir + "/a.sock\n" + rule, true},
		{"trusted", "listen: unix:" + dir + "/a.sock\nclient_ip: {trusted_proxies: [\"unix:\"]}\n" + rule, false},
		{"tcp", "listen: 127.0.0.1:0\n" + rule, false},
		{"no ip rule", "listen: unix:" + dir + "/a.sock\nrules:\n  - {name: per-key, key: [header:X-Key], rate: 10/s}\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("w.yaml", []byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			ws := c.UnixWarnings()
			if !tc.warn {
				if len(ws) != 0 {
					t.Errorf("UnixWarnings() = %v, want none", ws)
				}
				return
			}
			if len(ws) != 1 || !strings.Contains(ws[0].Error(), "per-ip") || !strings.Contains(ws[0].Error(), "trusted_proxies") || ws[0].Key != "listen" {
				t.Errorf("UnixWarnings() = %v, want one on listen naming per-ip and trusted_proxies", ws)
			}
		})
	}
}

// withUnixTLS adds api.tls and grpc.tls, with mutual TLS, to y, a
// unixConfig.
func withUnixTLS(y string) string {
	cert := filepath.Join("testdata", "config", "tls")
	block := "{cert: " + filepath.Join(cert, "server.pem") + ", key: " + filepath.Join(cert, "server-key.pem") +
		", client_ca: " + filepath.Join(cert, "ca.pem") + ", client_sans: [gw.example]}"
	y = strings.Replace(y, "  config:", "  tls: "+block+"\n  config:", 1)
	return y + "api:\n  tls: " + block + "\n"
}

// TLS on a Unix socket (api.tls beside listen: unix:…, grpc.tls beside
// grpc.listen: unix:…), with client_ca and client_sans, is taken.
func TestUnixTLS(t *testing.T) {
	dir := t.TempDir()
	y := withUnixTLS(unixConfig(t, dir, "unix:"+dir+"/a.sock", "unix:"+dir+"/g.sock", ""))
	c, err := Parse("u.yaml", []byte(y))
	if err != nil {
		t.Fatalf("Parse:\n%s\n%v", y, err)
	}
	if c.API.TLS == nil || c.GRPC.TLS == nil || len(c.API.TLS.ClientSANs) != 1 || len(c.GRPC.TLS.ClientSANs) != 1 {
		t.Errorf("api.tls %+v, grpc.tls %+v; want both, with client_sans", c.API.TLS, c.GRPC.TLS)
	}
}
