package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// dbConfig is a daemon proxying to upstream on the Redis at addr, in
// database db, with three rules: exact (4/h, on the decision API), jobs
// (POST /jobs, 1/m, action: defer) and auto (shards: auto).
func dbConfig(upstream, addr string, db int) string {
	return proxyConfig(upstream, fmt.Sprintf(`
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s, db: %d}
rules:
  - name: exact
    match: {path: /exact}
    rate: 4/h
    algorithm: token_bucket
  - name: jobs
    match: {path: /jobs}
    rate: 1/m
    algorithm: token_bucket
    action: defer
  - name: auto
    match: {path: /auto}
    rate: 1000000/s
    shards: auto
`, addr, db))
}

// dbSize is DBSIZE of database db of the Redis at addr.
func dbSize(t *testing.T, addr string, db int) string {
	t.Helper()
	n, err := redistest.DoIn(addr, db, "DBSIZE")
	if err != nil {
		t.Fatalf("DBSIZE in db %d: %v", db, err)
	}
	return n
}

// TestRedisDBKeepsDaemonsApart: two daemons on databases 1 and 2 of one
// Redis, with the same key_prefix, keep their counts apart, and
// everything each runs in Redis lands in its own database: the
// counters, the deferral queue's stream, the fleet's hot-key set.
// Database 0 stays empty.
func TestRedisDBKeepsDaemonsApart(t *testing.T) {
	rs := redistest.StartServer(t)
	up := startUpstream(t)
	a := startDaemon(t, dbConfig(up.url, rs.Addr, 1))
	b := startDaemon(t, dbConfig(up.url, rs.Addr, 2))
	if n := allowedOf(t, a.api, "exact", "k", 6); n != 4 {
		t.Errorf("daemon on db 1: %d of 6 allowed, want the limit 4", n)
	}
	if n := allowedOf(t, b.api, "exact", "k", 6); n != 4 {
		t.Errorf("daemon on db 2: %d of 6 allowed, want the limit 4 (db 1's count apart)", n)
	}
	// jobs: the first passes, the second is deferred into the queue.
	for _, td := range []*testDaemon{a, b} {
		if r := do(t, http.MethodPost, td.proxy+"/jobs", "first"); r.status != http.StatusOK {
			t.Fatalf("first job: %d %s, want 200", r.status, r.body)
		}
		if r := do(t, http.MethodPost, td.proxy+"/jobs", "second"); r.status != http.StatusAccepted {
			t.Fatalf("second job: %d %s, want 202 (deferred)", r.status, r.body)
		}
	}
	// auto: a key hot on the daemon goes to the fleet's set in Redis.
	ctx := context.Background()
	for _, td := range []*testDaemon{a, b} {
		e := td.d.engine()
		r := e.Rules().Rule("auto")
		key := r.Name + "|" + r.Fingerprint + "|busy"
		waitFor(t, "the key hot and shared", func() bool {
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for range 100 {
						e.Check(ctx, r, key, 1)
					}
				})
			}
			wg.Wait()
			td.d.refreshHot(time.Now())
			n, err := redistest.DoIn(rs.Addr, dbOf(td), "ZCARD", "sluice:hot:auto")
			return err == nil && n != "0"
		})
	}
	stream := "sluice:defer:{" + deferq.Tag("jobs") + "}:q"
	for _, db := range []int{1, 2} {
		if n, err := redistest.DoIn(rs.Addr, db, "XLEN", stream); err != nil || n == "0" {
			t.Errorf("XLEN %s in db %d = %q, %v; want the deferred job", stream, db, n, err)
		}
		keys, _ := redistest.DoIn(rs.Addr, db, "KEYS", "sluice:*exact*")
		if keys == "" {
			t.Errorf("db %d: no key of rule exact", db)
		}
	}
	if n := dbSize(t, rs.Addr, 0); n != "0" {
		keys, _ := redistest.Do(rs.Addr, "KEYS", "*")
		t.Errorf("DBSIZE of db 0 = %s, want 0; keys:\n%s", n, keys)
	}
}

// dbOf is the store.redis.db of td's config in force.
func dbOf(td *testDaemon) int { return td.d.cur.Load().cfg.Store.Redis.DB }

// TestRedisDBSentinelFailover: with Sentinel, the connections to the
// replica promoted by a failover select the database too: the count goes
// on there (the replica has it in that database), and database 0 of the
// new master stays empty.
func TestRedisDBSentinelFailover(t *testing.T) {
	master := redistest.StartServer(t)
	replica := redistest.StartReplica(t, master)
	sentinel := redistest.StartSentinelFor(t, master, time.Second, []*redistest.Server{replica})
	td := startDaemon(t, fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], sentinel: mymaster, timeout: 2s, db: 5}
  on_error: deny
rules:
  - name: exact
    rate: 4/h
    algorithm: token_bucket
`, sentinel))
	if n := allowedOf(t, td.api, "exact", "k", 2); n != 2 {
		t.Fatalf("before the failover: %d of 2 allowed", n)
	}
	redistest.WaitReplicated(t, master, replica)
	master.Kill()
	exact := 2
	waitFor(t, "decisions on the promoted replica", func() bool {
		a, status := check(t, td.api, "exact", "k", 1)
		if a.Allowed {
			exact++
		}
		return status == http.StatusOK
	})
	exact += allowedOf(t, td.api, "exact", "k", 4)
	if exact != 4 {
		t.Errorf("%d admitted across the failover, want the limit 4 (the replica had the 2 before, in db 5)", exact)
	}
	if got, err := redistest.Do(replica.Addr, "ROLE"); err != nil || !strings.HasPrefix(got, "master") {
		t.Errorf("ROLE of the replica = %q, %v; want master", got, err)
	}
	if n := dbSize(t, replica.Addr, 5); n == "0" {
		t.Error("DBSIZE of db 5 on the promoted replica = 0, want the counters")
	}
	if n := dbSize(t, replica.Addr, 0); n != "0" {
		keys, _ := redistest.Do(replica.Addr, "KEYS", "*")
		t.Errorf("DBSIZE of db 0 on the promoted replica = %s, want 0; keys:\n%s", n, keys)
	}
}

// TestRedisDBReloadNeedsRestart: store.redis.db is bound at startup, as
// the other store keys: a reload that changes it is refused naming the
// key and its line, and the daemon goes on counting in the old database.
func TestRedisDBReloadNeedsRestart(t *testing.T) {
	rs := redistest.StartServer(t)
	conf := func(db int) string {
		return fmt.Sprintf("listen: 127.0.0.1:0\nstore:\n  type: redis\n  redis:\n    addrs: [%s]\n    timeout: 2s\n    db: %d\nrules:\n  - {name: exact, rate: 4/h, algorithm: token_bucket}\n", rs.Addr, db)
	}
	td := startDaemon(t, conf(1))
	mustWrite(t, td.path, conf(2))
	err := td.d.Reload()
	if !errors.Is(err, errRestartOnly) || !strings.Contains(err.Error(), "store.redis.db (line 7)") {
		t.Fatalf("reload from db 1 to db 2 = %v; want refused, needing a restart, naming store.redis.db (line 7)", err)
	}
	if n := allowedOf(t, td.api, "exact", "k", 1); n != 1 {
		t.Fatal("no decision after the refused reload")
	}
	if n := dbSize(t, rs.Addr, 1); n == "0" {
		t.Error("DBSIZE of db 1 = 0 after the refused reload, want the counter there")
	}
	if n := dbSize(t, rs.Addr, 2); n != "0" {
		t.Errorf("DBSIZE of db 2 = %s after the refused reload, want 0", n)
	}
}

// TestRedisDBOutOfRange: a database Redis does not have (past its
// databases setting) stops the daemon at startup, naming store.redis.db:
// no outage to wait out.
func TestRedisDBOutOfRange(t *testing.T) {
	rs := redistest.StartServerWith(t, "--databases", "4")
	err := newWith(t, fmt.Sprintf("listen: 127.0.0.1:0\nstore:\n  type: redis\n  redis: {addrs: [%s], timeout: 2s, db: 4}\n", rs.Addr))
	if err == nil {
		t.Fatal("New with db 4 on a Redis of 4 databases: started, want refused")
	}
	if !errors.Is(err, redisstore.ErrDB) || !strings.Contains(err.Error(), "check store.redis.db") {
		t.Errorf("New with db 4 on a Redis of 4 databases = %v; want ErrDB, pointing at store.redis.db", err)
	}
}

// TestRedisDBACLChannel: on a database other than 0 the refunds go out on
// a channel that names it (Pub/Sub is not per database), and the ACL
// check at startup asks for that channel: a user allowed the channel of
// database 0 alone is refused, naming the one it lacks; one allowed it
// starts.
func TestRedisDBACLChannel(t *testing.T) {
	addr := redistest.StartServer(t).Addr
	for _, u := range [][]string{{"zero", "&sluice:refunds"}, {"one", "&sluice:refunds:db1"}} {
		if _, err := redistest.Do(addr, "ACL", "SETUSER", u[0], "on", ">pw", "~sluice:*", u[1], "+@all"); err != nil {
			t.Fatal(err)
		}
	}
	conf := func(user string) string {
		return fmt.Sprintf("listen: 127.0.0.1:0\nstore:\n  type: redis\n  redis: {addrs: [%s], timeout: 2s, db: 1, username: %s, password: pw}\nrules:\n  - {name: plain, rate: 5/m}\n", addr, user)
	}
	err := newWith(t, conf("zero"))
	if !errors.Is(err, redisstore.ErrAuth) || !strings.Contains(err.Error(), "sluice:refunds:db1") {
		t.Errorf("db 1, a user allowed &sluice:refunds alone: New = %v; want ErrAuth naming the channel sluice:refunds:db1", err)
	}
	if err := newWith(t, conf("one")); err != nil {
		t.Errorf("db 1, a user allowed &sluice:refunds:db1: New = %v; want started", err)
	}
}
