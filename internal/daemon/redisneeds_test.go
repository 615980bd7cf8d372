package daemon

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/redistest"
)

// needsConfig is a Redis config with a defer rule, a shards: auto rule,
// both or neither (features "defer", "auto"), for user u.
func needsConfig(addrs []string, cluster bool, user string, features ...string) string {
	text := fmt.Sprintf(`listen: 127.0.0.1:0
proxy: {listen: 127.0.0.1:0, upstream: "http://127.0.0.1:1"}
store:
  type: redis
  redis: {addrs: [%s], cluster: %v, timeout: 2s, username: %s, password: pw}
rules:
  - name: plain
    rate: 5/m
`, strings.Join(addrs, ", "), cluster, user)
	for _, f := range features {
		switch f {
		case "defer":
			text += "  - name: jobs\n    match: {path: /jobs}\n    rate: 1/m\n    action: defer\n"
		case "auto":
			text += "  - name: hot\n    rate: 1000/s\n    shards: auto\n"
		}
	}
	return text
}

// newWith builds a daemon of text; its error, or nil (and it is closed).
func newWith(t *testing.T, text string) error {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(cfg, Options{})
	if err == nil {
		d.Close()
	}
	return err
}

// A user whose ACL lacks a command a configured feature runs besides the
// store's scripts (the deferral streams of action: defer, the hot-key
// sets of shards: auto, INFO for the restart watch) is a startup error
// naming the command and the feature. It used to start, and the feature
// failed NOPERM at every turn (deferred requests refused, replay never
// reading, run_ids never read). A command no feature of the config runs
// is not asked for.
func TestRedisACLFeatureNeeds(t *testing.T) {
	addr := redistest.StartServer(t).Addr
	for _, u := range [][]string{{"noread", "-xreadgroup"}, {"nozadd", "-zadd"}, {"noinfo", "-info"}} {
		args := append([]string{"ACL", "SETUSER", u[0], "on", ">pw", "~sluice:*", "&*", "+@all"}, u[1:]...)
		if _, err := redistest.Do(addr, args...); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		user     string
		features []string
		want     []string // in New's error; none: starts
	}{
		{"noread", []string{"defer", "auto"}, []string{"XREADGROUP", `action: defer of rule "jobs"`}},
		{"noread", []string{"auto"}, nil},
		{"nozadd", []string{"defer", "auto"}, []string{"ZADD", `shards: auto of "hot"`}},
		{"nozadd", []string{"defer"}, nil},
		{"noinfo", nil, []string{"INFO", "the restart watch"}},
	} {
		err := newWith(t, needsConfig([]string{addr}, false, tc.user, tc.features...))
		if tc.want == nil {
			if err != nil {
				t.Errorf("user %s with %v: New: %v; want started", tc.user, tc.features, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("user %s with %v: started; want an error naming %q", tc.user, tc.features, tc.want)
			continue
		}
		for _, w := range append(tc.want, "store.redis.username", `user "`+tc.user+`"`) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("user %s with %v: New: %v; want it to name %q", tc.user, tc.features, err, w)
			}
		}
	}
}

// On a Cluster, users are per node: a user lacking XREADGROUP on one
// master only is refused at startup, naming that master.
func TestRedisACLFeatureNeedsCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	for i, a := range c.Addrs {
		args := []string{"ACL", "SETUSER", "u", "on", ">pw", "~sluice:*", "&*", "+@all"}
		if i == 2 {
			args = append(args, "-xreadgroup")
		}
		if _, err := redistest.Do(a, args...); err != nil {
			t.Fatal(err)
		}
	}
	err := newWith(t, needsConfig(c.Addrs, true, "u", "defer"))
	if err == nil || !strings.Contains(err.Error(), "XREADGROUP") || !strings.Contains(err.Error(), "master "+c.Addrs[2]) || strings.Contains(err.Error(), "master "+c.Addrs[0]) {
		t.Errorf("New with master %s lacking XREADGROUP: %v; want an error naming XREADGROUP and that master only", c.Addrs[2], err)
	}
	if err := newWith(t, needsConfig(c.Addrs, true, "u")); err != nil {
		t.Errorf("New without a defer rule: %v; want started", err)
	}
}

// A reload that adds a feature whose commands the user's ACL lacks (a
// defer rule, for a user without XREADGROUP) is refused, naming the
// command and the rule, and the rules in force stay; once the ACL allows
// it, the same reload applies. It used to apply, and the new rule failed
// NOPERM at every turn.
func TestRedisACLFeatureNeedsReload(t *testing.T) {
	addr := redistest.StartServer(t).Addr
	if _, err := redistest.Do(addr, "ACL", "SETUSER", "noread", "on", ">pw", "~sluice:*", "&*", "+@all", "-xreadgroup"); err != nil {
		t.Fatal(err)
	}
	td := startDaemon(t, needsConfig([]string{addr}, false, "noread"))
	if err := os.WriteFile(td.path, []byte(needsConfig([]string{addr}, false, "noread", "defer")), 0o644); err != nil {
		t.Fatal(err)
	}
	err := td.d.Reload()
	if err == nil || !strings.Contains(err.Error(), "XREADGROUP") || !strings.Contains(err.Error(), `action: defer of rule "jobs"`) {
		t.Errorf("reload adding a defer rule for a user without XREADGROUP: %v; want it refused, naming XREADGROUP and the rule", err)
	}
	if td.d.engine().Rules().Rule("jobs") != nil {
		t.Errorf("after the refused reload, rule jobs is in force")
	}
	if _, err := redistest.Do(addr, "ACL", "SETUSER", "noread", "+xreadgroup"); err != nil {
		t.Fatal(err)
	}
	if err := td.d.Reload(); err != nil {
		t.Fatalf("reload once the ACL allows XREADGROUP: %v", err)
	}
	if td.d.engine().Rules().Rule("jobs") == nil {
		t.Errorf("after the reload, rule jobs is not in force")
	}
}

// A reload that adds a feature while the daemon makes its first
// connection to Redis (it started while Redis did not answer) is checked
// by that connection: a user whose ACL lacks the feature's commands is
// refused, naming them, and the daemon connects once the ACL allows
// them. The connection used to check the needs it read when it began
// and the reload, finding no connection yet, left them to it: the daemon
// connected, /readyz said ready, and the new rule failed NOPERM at every
// turn. The Holder keeps the connection's ACL probe from Redis until the
// reload is done.
func TestRedisACLFeatureNeedsReloadWhileConnecting(t *testing.T) {
	rs := redistest.StartServer(t)
	if _, err := redistest.Do(rs.Addr, "ACL", "SETUSER", "noread", "on", ">pw", "~sluice:*", "&*", "+@all", "-xreadgroup"); err != nil {
		t.Fatal(err)
	}
	holder := redistest.NewHolder(t, rs.Addr, "acl-probe")
	gate := redistest.NewGate(t, holder.Addr)
	gate.Shut()
	conf := func(features ...string) string {
		// A timeout longer than the test: the held connection must not
		// give up and leave the check to the next one.
		return strings.Replace(needsConfig([]string{gate.Addr}, false, "noread", features...), "timeout: 2s", "timeout: 1m", 1)
	}
	td := startDaemon(t, conf())
	holder.Hold()
	gate.Open()
	select {
	case <-holder.Held():
	case <-time.After(safety):
		t.Fatalf("no connection to Redis within %v of the gate opening", safety)
	}
	if err := os.WriteFile(td.path, []byte(conf("defer")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := td.d.Reload(); err != nil {
		t.Fatalf("reload adding a defer rule while connecting: %v; want it applied (checked when the connection is made)", err)
	}
	holder.Release()
	const connected, refused = "connected to Redis", "Redis refused the connection"
	waitFor(t, "the held connection's outcome", func() bool {
		s := td.logs.String()
		return strings.Contains(s, connected) || strings.Contains(s, refused)
	})
	logs := td.logs.String()
	if strings.Contains(logs, connected) {
		t.Fatalf("connected to Redis for a user without XREADGROUP, with a defer rule in force: its needs went unchecked")
	}
	for _, w := range []string{"XREADGROUP", `action: defer of rule \"jobs\"`} {
		if !strings.Contains(logs, w) {
			t.Errorf("the refusal does not name %q: %s", w, logs)
		}
	}
	if _, err := redistest.Do(rs.Addr, "ACL", "SETUSER", "noread", "+xreadgroup"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "connected once the ACL allows XREADGROUP", func() bool { return strings.Contains(td.logs.String(), connected) })
	if r := get(t, td.api+"/readyz"); r.status != http.StatusOK {
		t.Errorf("GET /readyz once connected: %d %q, want 200", r.status, r.body)
	}
}

// A Redis that comes up refusing the daemon, after the daemon told that it
// did not answer, is logged at once, naming what it refuses: the refusal
// used to be logged only at the first attempt or every 60th, so after an
// outage the log said nothing for up to a minute (here the user lacks
// XREADGROUP, which the config's defer rule needs).
func TestRedisRefusalLoggedAfterOutage(t *testing.T) {
	rs := redistest.StartServer(t)
	if _, err := redistest.Do(rs.Addr, "ACL", "SETUSER", "noread", "on", ">pw", "~sluice:*", "&*", "+@all", "-xreadgroup"); err != nil {
		t.Fatal(err)
	}
	gate := redistest.NewGate(t, rs.Addr)
	gate.Shut()
	td := startDaemon(t, needsConfig([]string{gate.Addr}, false, "noread", "defer"))
	waitFor(t, "the outage logged", func() bool { return strings.Contains(td.logs.String(), "Redis does not answer") })
	gate.Open()
	waitFor(t, "the refusal logged", func() bool { return strings.Contains(td.logs.String(), "Redis refused the connection") })
	if logs := td.logs.String(); !strings.Contains(logs, "XREADGROUP") {
		t.Errorf("the refusal does not name XREADGROUP: %s", logs)
	}
}
