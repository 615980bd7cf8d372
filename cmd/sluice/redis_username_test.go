package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// store.redis.username on a Redis older than 6.0 (no ACL users: its
// AUTH takes the password alone) makes `sluice serve` exit 1 naming the
// key, the version it needs and what Redis answered: it used to start
// and warn "Redis does not answer; retrying" with the raw AUTH error.
// Redis here is 7.0.15; a relay answers HELLO and AUTH with a username as
// Redis 5.0 does.
func TestServeRedisUsernameBeforeRedis6(t *testing.T) {
	rs := redistest.StartServer(t)
	five := redistest.NewOlder(t, rs.Addr, "5.0.14")
	if _, err := redistest.Do(rs.Addr, "ACL", "SETUSER", "u", "on", ">pw", "~*", "&*", "+@all"); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	conf := fmt.Sprintf(`listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s, username: u, password: pw}
rules:
  - name: two
    rate: 2/h
`, five.Addr)
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stderr := serveExit(t, path)
	if code != 1 {
		t.Errorf("exit %d, want 1; stderr:\n%s", code, stderr)
	}
	for _, w := range []string{"store.redis.username needs Redis 6.0 or later", "wrong number of arguments for 'auth' command"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr %q, want it to say %q", stderr, w)
		}
	}
}
