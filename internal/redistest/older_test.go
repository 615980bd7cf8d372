package redistest

import (
	"io"
	"net"
	"strings"
	"testing"
)

// Through an Older, INFO tells the version given, and nothing else
// changes.
func TestOlder(t *testing.T) {
	s := StartServer(t)
	x := NewOlder(t, s.Addr, "6.0.16")
	direct, err := Do(s.Addr, "INFO", "server")
	if err != nil {
		t.Fatal(err)
	}
	through, err := Do(x.Addr, "INFO", "server")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(through, "redis_version:6.0.16\r\n") || strings.Contains(direct, "redis_version:6.0.16") {
		t.Errorf("INFO through the relay does not tell 6.0.16:\n%s", through)
	}
	id := func(info string) string {
		_, v, _ := strings.Cut(info, "run_id:")
		v, _, _ = strings.Cut(v, "\r\n")
		return v
	}
	if id(direct) == "" || id(through) != id(direct) {
		t.Errorf("run_id through the relay %q, direct %q; want the same", id(through), id(direct))
	}
	if got, err := Do(x.Addr, "ECHO", "redis_version:7.0.1"); err != nil || got != "redis_version:7.0.1" {
		t.Errorf("ECHO of a start of the version's line = %q, %v; want it whole", got, err)
	}
}

// A version's line split between two of Redis's writes is rewritten too,
// and a read that ends with what could start it is held only until the
// next.
func TestOlderSplit(t *testing.T) {
	x := &Older{from: []byte("redis_version:7.0.15"), to: []byte("redis_version:6.0.16")}
	c, client := net.Pipe()
	s, server := net.Pipe()
	go func() { x.back(c, s); c.Close() }()
	go func() {
		for _, w := range []string{"$40\r\n# Server\r\nredis_vers", "ion:7.0.15\r\nrun_id:abc\r\n", "+redis_vers", "ion\r\n"} {
			server.Write([]byte(w))
		}
		server.Close()
	}()
	got, err := io.ReadAll(client)
	if err != nil {
		t.Fatal(err)
	}
	if want := "$40\r\n# Server\r\nredis_version:6.0.16\r\nrun_id:abc\r\n+redis_version\r\n"; string(got) != want {
		t.Errorf("through the relay: %q; want %q", got, want)
	}
}
