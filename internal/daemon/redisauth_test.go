package daemon

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/redistest"
)

// secureRedis sets a password (requirepass s3cret) on the nodes at addrs,
// an ACL user lim (password limpw) that may run anything on the keys
// under sluice: only, and a user noscript (password limpw) that may not
// run scripts.
func secureRedis(t *testing.T, addrs []string) {
	t.Helper()
	for _, a := range addrs {
		for _, cmd := range [][]string{
			{"ACL", "SETUSER", "lim", "on", ">limpw", "~sluice:*", "&*", "+@all"},
			{"ACL", "SETUSER", "noscript", "on", ">limpw", "~sluice:*", "&*", "+@all", "-@scripting"},
			{"CONFIG", "SET", "requirepass", "s3cret"},
		} {
			if _, err := redistest.Do(a, cmd...); err != nil {
				t.Fatalf("%s on %s: %v", cmd, a, err)
			}
		}
	}
}

func authConfig(addrs []string, cluster bool, creds string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], cluster: %v, timeout: 2s%s}
rules:
  - name: two
    rate: 2/h
    algorithm: fixed_window
`, strings.Join(addrs, ", "), cluster, creds)
}

// store.redis.password and username reach Redis: with requirepass or an
// ACL user the daemon connects and counts (a third request of 2/h is
// refused, which an unconnected store failing open would not do), on a
// single node and on a 3-master Cluster.
func TestRedisAuthConnects(t *testing.T) {
	t.Parallel() // a Cluster (or Redis) and daemons of its own
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	for _, kind := range []string{"redis", "cluster"} {
		t.Run(kind, func(t *testing.T) {
			addrs := []string{}
			if kind == "redis" {
				addrs = append(addrs, redistest.StartServer(t).Addr)
			} else {
				addrs = redistest.StartCluster(t).Addrs
			}
			secureRedis(t, addrs)
			for _, creds := range []string{", password: s3cret", ", username: lim, password: limpw"} {
				td := startDaemon(t, authConfig(addrs, kind == "cluster", creds))
				if r := get(t, td.api+"/readyz"); r.status != http.StatusOK {
					t.Fatalf("%s: /readyz %d %s, want 200", creds, r.status, r.body)
				}
				if got := allowedOf(t, td.api, "two", "k"+creds, 3); got != 2 {
					t.Errorf("%s: %d of 3 admitted under 2/h, want 2 (counted in Redis)", creds, got)
				}
			}
		})
	}
}

// Credentials Redis refuses, or a user its ACL keeps from running the
// store's scripts, are a startup error naming the problem and the keys to
// fix, not a daemon that starts, fails open on every request and logs that
// Redis "does not answer" (or, for the ACL, whose /readyz passes).
func TestRedisAuthRefusedAtStartup(t *testing.T) {
	t.Parallel() // a Cluster (or Redis) and daemons of its own
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	for _, kind := range []string{"redis", "cluster"} {
		t.Run(kind, func(t *testing.T) {
			addrs := []string{}
			if kind == "redis" {
				addrs = append(addrs, redistest.StartServer(t).Addr)
			} else {
				addrs = redistest.StartCluster(t).Addrs
			}
			secureRedis(t, addrs)
			for _, tc := range []struct{ creds, what, redis string }{
				{", password: wrong", "refused the credentials", "WRONGPASS"},
				{", username: lim, password: s3cret", "refused the credentials", "WRONGPASS"},
				{", username: nobody, password: limpw", "refused the credentials", "WRONGPASS"},
				{"", "refused the credentials", "NOAUTH"},
				{", username: noscript, password: limpw", `keeps user "noscript" from running the store's scripts`, "NOPERM"},
			} {
				path := filepath.Join(t.TempDir(), "sluice.yaml")
				if err := os.WriteFile(path, []byte(authConfig(addrs, kind == "cluster", tc.creds)), 0o644); err != nil {
					t.Fatal(err)
				}
				cfg, err := config.Load(path)
				if err != nil {
					t.Fatal(err)
				}
				d, err := New(cfg, Options{})
				if err == nil {
					d.Close()
					t.Errorf("New with%s: nil error, want the credentials refused", tc.creds)
					continue
				}
				msg := err.Error()
				for _, want := range []string{"store.redis", tc.what, "store.redis.username", tc.redis} {
					if !strings.Contains(msg, want) {
						t.Errorf("New with%s: %q, want it to say %q", tc.creds, msg, want)
					}
				}
			}
		})
	}
}

// A user whose ACL loses the scripts while the daemon runs: /readyz fails,
// naming Redis's NOPERM, where it passed (PING still answered) while every
// decision failed; it passes again once the ACL is back.
func TestRedisACLLostReady(t *testing.T) {
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	addr := redistest.StartServer(t).Addr
	secureRedis(t, []string{addr})
	td := startDaemon(t, authConfig([]string{addr}, false, ", username: lim, password: limpw"))
	if r := get(t, td.api+"/readyz"); r.status != http.StatusOK {
		t.Fatalf("/readyz: %d %s, want 200", r.status, r.body)
	}
	admin, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, Password: "s3cret", ForceSingleClient: true, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	acl := func(rule string) {
		t.Helper()
		if err := admin.Do(context.Background(), admin.B().AclSetuser().Username("lim").Rule(rule).Build()).Error(); err != nil {
			t.Fatalf("ACL SETUSER lim %s: %v", rule, err)
		}
	}
	acl("-@scripting")
	if r := get(t, td.api+"/readyz"); r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, "NOPERM") {
		t.Errorf("/readyz with lim's scripts taken away: %d %s, want 503 naming NOPERM", r.status, r.body)
	}
	acl("+@scripting")
	if r := get(t, td.api+"/readyz"); r.status != http.StatusOK {
		t.Errorf("/readyz with the scripts back: %d %s, want 200", r.status, r.body)
	}
}
