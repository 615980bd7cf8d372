package daemon

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// versionUser makes user u, allowed everything Sluice runs, on the Redis
// at addr.
func versionUser(t *testing.T, addr string) {
	t.Helper()
	if _, err := redistest.Do(addr, "ACL", "SETUSER", "u", "on", ">pw", "~sluice:*", "&*", "+@all"); err != nil {
		t.Fatal(err)
	}
}

// A Redis older than a configured feature needs is a startup error naming
// the feature, the version it needs and what needs it, and the version
// found at the address: the daemon used to start, and the feature failed
// at every turn (action: defer's XAUTOCLAIM, an unknown command before
// 6.2). A Redis older than the store's scripts need (TIME before writes:
// 5.0) is refused whatever the rules. Redis here is 7.0.15; a relay makes
// its INFO tell an older version.
func TestRedisVersionRefused(t *testing.T) {
	rs := redistest.StartServer(t)
	versionUser(t, rs.Addr)
	six := redistest.NewOlder(t, rs.Addr, "6.0.16")
	four := redistest.NewOlder(t, rs.Addr, "4.0.14")
	// Redis 4 has no ACL users (its AUTH takes the password alone): the
	// default user, with the password pw.
	if _, err := redistest.Do(rs.Addr, "CONFIG", "SET", "requirepass", "pw"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr     string
		user     string
		features []string
		want     []string // in New's error; none: starts
	}{
		{six.Addr, "u", []string{"defer", "auto"}, []string{`action: defer of rule "jobs" needs Redis 6.2 or later (XAUTOCLAIM)`, six.Addr + " runs 6.0.16"}},
		{six.Addr, "u", []string{"auto"}, nil},
		{rs.Addr, "u", []string{"defer", "auto"}, nil},
		// No feature to leave out: the hint says so.
		{four.Addr, `""`, nil, []string{"needs Redis 5.0 or later (TIME", four.Addr + " runs 4.0.14", "; upgrade Redis: Sluice needs Redis 5.0 or later whatever the config"}},
	} {
		err := newWith(t, needsConfig([]string{tc.addr}, false, tc.user, tc.features...))
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s with %v: New: %v; want started", tc.addr, tc.features, err)
			}
			continue
		}
		if err == nil || !errors.Is(err, redisstore.ErrVersion) {
			t.Errorf("%s with %v: New: %v; want ErrVersion naming %q", tc.addr, tc.features, err, tc.want)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s with %v: New: %v; want it to name %q", tc.addr, tc.features, err, w)
			}
		}
		if tc.features == nil && strings.Contains(err.Error(), "leave out the feature") {
			t.Errorf("%s with no feature: New: %v; want no advice to leave a feature out", tc.addr, err)
		}
	}
}

// A reload that adds a feature the server is too old for (a defer rule,
// on a Redis that tells 6.0.16) is refused in the words of a startup, and
// the rules in force stay.
func TestRedisVersionReload(t *testing.T) {
	rs := redistest.StartServer(t)
	versionUser(t, rs.Addr)
	six := redistest.NewOlder(t, rs.Addr, "6.0.16")
	td := startDaemon(t, needsConfig([]string{six.Addr}, false, "u"))
	if err := os.WriteFile(td.path, []byte(needsConfig([]string{six.Addr}, false, "u", "defer")), 0o644); err != nil {
		t.Fatal(err)
	}
	err := td.d.Reload()
	want := `action: defer of rule "jobs" needs Redis 6.2 or later (XAUTOCLAIM); ` + six.Addr + " runs 6.0.16"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("reload adding a defer rule on Redis 6.0.16: %v; want it refused, naming %q", err, want)
	}
	if td.d.engine().Rules().Rule("jobs") != nil {
		t.Errorf("after the refused reload, rule jobs is in force")
	}
	if td.d.engine().Rules().Rule("plain") == nil {
		t.Errorf("after the refused reload, rule plain is no longer in force")
	}
}

// A daemon that started while Redis did not answer, and finds it too old
// for its config when it answers, logs the refusal at once, naming the
// feature and the version, and keeps /readyz failing: it used to connect,
// ready, with the feature failing at every turn.
func TestRedisVersionRefusedAfterOutage(t *testing.T) {
	rs := redistest.StartServer(t)
	versionUser(t, rs.Addr)
	six := redistest.NewOlder(t, rs.Addr, "6.0.16")
	gate := redistest.NewGate(t, six.Addr)
	gate.Shut()
	td := startDaemon(t, needsConfig([]string{gate.Addr}, false, "u", "defer"))
	waitFor(t, "the outage logged", func() bool { return strings.Contains(td.logs.String(), "Redis does not answer") })
	gate.Open()
	waitFor(t, "the refusal logged", func() bool { return strings.Contains(td.logs.String(), "Redis refused the connection") })
	logs := td.logs.String()
	for _, w := range []string{`action: defer of rule \"jobs\" needs Redis 6.2 or later (XAUTOCLAIM)`, "runs 6.0.16", "upgrade Redis"} {
		if !strings.Contains(logs, w) {
			t.Errorf("the refusal does not name %q: %s", w, logs)
		}
	}
	if td.d.lazy.Connected() {
		t.Errorf("connected to a Redis too old for the config's defer rule")
	}
}

// store.redis.username on a Redis older than 6.0 (no ACL users: AUTH
// takes the password alone) stops the startup naming the key, the
// version it needs and what Redis answered: the daemon used to start,
// warning "Redis does not answer" with the raw AUTH error at every retry.
// A daemon whose Redis is replaced by such a one later (through a
// switch) refuses a reload in the same words, as /readyz fails with
// them. Redis here is 7.0.15; a relay answers HELLO and AUTH with a
// username as Redis 5.0 does.
func TestRedisUsernameBeforeRedis6(t *testing.T) {
	rs := redistest.StartServer(t)
	versionUser(t, rs.Addr)
	five := redistest.NewOlder(t, rs.Addr, "5.0.14")
	want := []string{"store.redis.username needs Redis 6.0 or later", `username "u" needs Redis 6.0 or later`, "wrong number of arguments for 'auth' command"}
	err := newWith(t, needsConfig([]string{five.Addr}, false, "u"))
	if tooOld, _ := redisstore.UsernameTooOld(err); !tooOld {
		t.Errorf("New with store.redis.username on Redis 5.0: %v; want it refused (UsernameTooOld)", err)
	}
	for _, w := range want {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("New with store.redis.username on Redis 5.0: %v; want it to say %q", err, w)
		}
	}

	sw := redistest.NewSwitch(t, rs.Addr)
	td := startDaemon(t, needsConfig([]string{sw.Addr}, false, "u"))
	sw.To(five.Addr)
	// The first calls may meet the connections the switch closed.
	waitFor(t, "/readyz naming the username", func() bool {
		r := get(t, td.api+"/readyz")
		return r.status != http.StatusOK && strings.Contains(r.body, "needs Redis 6.0 or later")
	})
	err = td.d.Reload()
	for _, w := range want {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("reload once Redis is 5.0: %v; want it refused, saying %q", err, w)
		}
	}
}

// The Sentinels given a username (the master's, which they get unless
// store.redis.sentinel_username or sentinel_password is set) when they
// are older than 6.2: the startup stops naming
// store.redis.sentinel_username and the Sentinel. A relay answers HELLO
// and AUTH with a username as a Sentinel 5.0 does; another makes a
// Sentinel tell 6.0.16, which, knowing no user but the default one,
// answers WRONGPASS (it used to be told as refused credentials).
func TestRedisUsernameBeforeSentinel62(t *testing.T) {
	master := redistest.StartServer(t)
	versionUser(t, master.Addr)
	sentinel := redistest.StartSentinel(t, master)
	for _, old := range []*redistest.Older{redistest.NewOlder(t, sentinel, "5.0.14"), redistest.NewOlder(t, sentinel, "6.0.16")} {
		err := newWith(t, fmt.Sprintf(`listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], sentinel: mymaster, timeout: 2s, username: u, password: pw}
rules:
  - name: plain
    rate: 5/m
`, old.Addr))
		for _, w := range []string{"store.redis.sentinel_username (left out, the Sentinels get store.redis.username) needs Sentinels of Redis 6.2 or later", "the Sentinel at " + old.Addr} {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("New with a username through a Sentinel at %s: %v; want it refused, saying %q", old.Addr, err, w)
			}
		}
	}
}
