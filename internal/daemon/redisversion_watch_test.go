package daemon

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// versionServers are two real Redis servers behind a switch (a virtual
// address moved from one to the other, as a failover or a restart on
// another binary puts another server in place): new runs 7.0.15 as it is,
// old is seen through a relay that tells 6.0.16. Both have user u.
type versionServers struct {
	sw  *redistest.Switch
	new *redistest.Server
	old *redistest.Server // behind older
	six *redistest.Older
}

func startVersionServers(t *testing.T) *versionServers {
	t.Helper()
	vs := &versionServers{new: redistest.StartServer(t), old: redistest.StartServer(t)}
	versionUser(t, vs.new.Addr)
	versionUser(t, vs.old.Addr)
	vs.six = redistest.NewOlder(t, vs.old.Addr, "6.0.16")
	vs.sw = redistest.NewSwitch(t, vs.new.Addr)
	return vs
}

// infoCalls is how many INFO commands the Redis at addr has run, less the
// one asking.
func infoCalls(t *testing.T, addr string) int {
	t.Helper()
	stats, err := redistest.Do(addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(stats) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_info:calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n - 1
		}
	}
	return 0
}

// waitTicks waits until the daemon's Redis watch has asked the Redis at
// addr for its run_id (INFO server) at least n more times.
func waitTicks(t *testing.T, addr string, n int) {
	t.Helper()
	start := infoCalls(t, addr)
	polls := 0
	waitFor(t, "the restart watch's ticks", func() bool {
		polls++
		return infoCalls(t, addr)-start-polls >= n
	})
}

const tooOldLog = "Redis is too old for the config"

// A server that takes the place of another (a failover, a restart on
// another binary) is checked against what the config needs, as at
// connect: one too old for action: defer (XAUTOCLAIM, 6.2) is logged at
// ERROR once, naming the feature, the version it needs and the server's,
// and sluice_redis_version_ok reads 0 until a good server is back. The
// daemon used to go on, every deferral failing as an unknown command
// taken for an outage, and nothing said why. /readyz stays as it was:
// every instance sees the same Redis.
func TestRedisVersionWatch(t *testing.T) {
	vs := startVersionServers(t)
	td := startDaemon(t, needsConfig([]string{vs.sw.Addr}, false, "u", "defer"))
	if v := td.metric("sluice_redis_version_ok"); v != 1 {
		t.Fatalf("sluice_redis_version_ok = %v on Redis 7.0, want 1", v)
	}
	vs.sw.To(vs.six.Addr)
	waitFor(t, "the too old server logged", func() bool { return strings.Contains(td.logs.String(), tooOldLog) })
	for _, w := range []string{`level=ERROR`, `action: defer of rule \"jobs\" needs Redis 6.2 or later (XAUTOCLAIM)`, vs.sw.Addr + " runs 6.0.16", "upgrade Redis"} {
		if !strings.Contains(td.logs.String(), w) {
			t.Errorf("the log of the too old server does not name %q: %s", w, td.logs.String())
		}
	}
	if v := td.metric("sluice_redis_version_ok"); v != 0 {
		t.Errorf("sluice_redis_version_ok = %v on Redis 6.0.16 with a defer rule, want 0", v)
	}
	if got := get(t, td.api+"/readyz"); got.status != 200 {
		t.Errorf("/readyz = %d %q on a server too old for a feature; want 200 (the whole fleet sees it)", got.status, got.body)
	}
	waitTicks(t, vs.old.Addr, 4) // two ticks at least, on the old server
	if n := strings.Count(td.logs.String(), tooOldLog); n != 1 {
		t.Errorf("the too old server logged %d times over several ticks, want once: %s", n, td.logs.String())
	}
	vs.sw.To(vs.new.Addr)
	waitFor(t, "sluice_redis_version_ok back to 1", func() bool { return td.metric("sluice_redis_version_ok") == 1 })
	if !strings.Contains(td.logs.String(), "Redis is recent enough for the config again") {
		t.Errorf("the good server back is not logged: %s", td.logs.String())
	}
	if n := strings.Count(td.logs.String(), tooOldLog); n != 1 {
		t.Errorf("the too old server logged %d times, want once: %s", n, td.logs.String())
	}
}

// The watch checks against the config in force, not the one at start: a
// reload that adds a defer rule makes a later old server a failure, and a
// reload that takes it out again clears it.
func TestRedisVersionWatchReload(t *testing.T) {
	vs := startVersionServers(t)
	td := startDaemon(t, needsConfig([]string{vs.sw.Addr}, false, "u"))
	reload := func(features ...string) {
		t.Helper()
		if err := os.WriteFile(td.path, []byte(needsConfig([]string{vs.sw.Addr}, false, "u", features...)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := td.d.Reload(); err != nil {
			t.Fatalf("reload with %v: %v", features, err)
		}
	}
	reload("defer")
	vs.sw.To(vs.six.Addr)
	waitFor(t, "the too old server logged", func() bool { return strings.Contains(td.logs.String(), tooOldLog) })
	if !strings.Contains(td.logs.String(), `action: defer of rule \"jobs\" needs Redis 6.2`) {
		t.Errorf("the log does not name the reloaded defer rule: %s", td.logs.String())
	}
	if v := td.metric("sluice_redis_version_ok"); v != 0 {
		t.Errorf("sluice_redis_version_ok = %v on Redis 6.0.16 with a reloaded defer rule, want 0", v)
	}
	reload()
	waitFor(t, "sluice_redis_version_ok back to 1 once the defer rule is gone", func() bool { return td.metric("sluice_redis_version_ok") == 1 })
}
