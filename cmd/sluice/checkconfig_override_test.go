package main

import (
	"bytes"
	"net"
	"strings"
	"testing"
)

// heldPort returns a port of 127.0.0.1 that the test holds bound until it
// ends: a listener that a check missed binds there and fails, rather than
// serve, never a fixed port.
func heldPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// TestCheckConfigOverridesAsServe: check-config takes serve's -listen,
// -proxy-listen and -grpc-listen, and says of the config with them what
// serve says: a clash between an override and the config's address (here
// written another way: localhost) is refused by both, with one message
// naming the flag, its address and the config's key and line; a config
// whose addresses are moved apart by the overrides passes both. It used
// to be that check-config could not be told them, and said ok of a
// config serve refused with them.
func TestCheckConfigOverridesAsServe(t *testing.T) {
	p := heldPort(t)
	path := writeConfig(t, "listen: 127.0.0.1:"+p+"\nproxy: {listen: 127.0.0.1:0, upstream: http://127.0.0.1:1}\nrules:\n  - {name: r, rate: 1/m}\n")
	for _, tc := range []struct {
		flags []string
		want  []string // in the one problem both print
	}{
		{[]string{"-proxy-listen", "localhost:" + p}, []string{`-proxy-listen "localhost:` + p + `"`, "listen (" + path + ":1)", "would both listen on", "localhost is 127.0.0.1"}},
		{[]string{"-listen", "127.0.0.1:0", "-proxy-listen", "[::ffff:127.0.0.1]:" + p, "-grpc-listen", "127.0.0.1:0"}, []string{"-grpc-listen: the config has no grpc block"}},
		{[]string{"-listen", "nowhere"}, []string{`-listen "nowhere": want host:port`}},
	} {
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), append(append([]string{"check-config"}, tc.flags...), path), nil, &stdout, &stderr)
		got := stderr.String()
		if code != 1 || stdout.Len() != 0 || strings.Count(got, "\n") != 1 || !strings.HasPrefix(got, path+": ") {
			t.Errorf("check-config %v: exit %d, stdout %q, stderr %q; want exit 1 and one line %q", tc.flags, code, stdout.String(), got, path+": …")
			continue
		}
		msg := strings.TrimSuffix(strings.TrimPrefix(got, path+": "), "\n")
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("check-config %v: %q lacks %q", tc.flags, msg, w)
			}
		}
		stderr.Reset()
		if code := serve(t.Context(), append([]string{"-config", path}, tc.flags...), &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), msg) {
			t.Errorf("serve %v: exit %d, stderr %q; want it refused (exit 2, as docs/daemon.md says) with check-config's %q", tc.flags, code, stderr.String(), msg)
		}
	}

	// Overrides that move the listeners apart: ok, and the summary shows
	// the addresses serve would listen on.
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"check-config", "-listen", "127.0.0.1:0", "-proxy-listen", "localhost:0", path}, nil, &stdout, &stderr); code != 0 ||
		!strings.Contains(stdout.String(), "api 127.0.0.1:0; proxy localhost:0 ->") {
		t.Errorf("check-config with overrides apart: exit %d, stdout %q, stderr %q; want ok, naming the overridden addresses", code, stdout.String(), stderr.String())
	}
}

// TestCheckConfigEnvironmentClash: addresses from the environment
// (${VAR}) are the config's, checked as written ones: two that are one
// address are refused by check-config, naming the second key's line.
func TestCheckConfigEnvironmentClash(t *testing.T) {
	p := heldPort(t)
	t.Setenv("SLUICE_TEST_API_ADDR", "127.0.0.1:"+p)
	t.Setenv("SLUICE_TEST_PROXY_ADDR", "LOCALHOST:"+p)
	path := writeConfig(t, "listen: ${SLUICE_TEST_API_ADDR}\nproxy: {listen: \"${SLUICE_TEST_PROXY_ADDR}\", upstream: http://127.0.0.1:1}\nrules:\n  - {name: r, rate: 1/m}\n")
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"check-config", path}, nil, &stdout, &stderr); code != 1 ||
		!strings.HasPrefix(stderr.String(), path+":2: proxy.listen: ") || !strings.Contains(stderr.String(), "already used by listen") {
		t.Errorf("check-config with one address from two variables: exit %d, stdout %q, stderr %q; want exit 1 naming proxy.listen's line and listen", code, stdout.String(), stderr.String())
	}
}
