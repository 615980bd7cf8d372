package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// -store redis on a Redis that asks for a password: the password comes
// from the environment variable REDIS_PASSWORD (never a flag), for the
// default user (requirepass) or for -redis-username's ACL user, and the
// run prints what -store memory prints. Without it, or with the wrong one,
// the run stops at once naming the refusal and what to check. Serial: it
// sets REDIS_PASSWORD.
func TestSimulateRedisPassword(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, cmd := range [][]string{
		{"ACL", "SETUSER", "u", "on", ">upw", "~*", "&*", "+@all"},
		{"CONFIG", "SET", "requirepass", "s3cret"},
	} {
		if _, err := redistest.Do(srv.Addr, cmd...); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"-algorithm", "gcra", "-rate", "2/s"}
	code, mem, errOut := simulateCmd(t, simTrace, args...)
	if code != 0 {
		t.Fatalf("-store memory: exit %d: %s", code, errOut)
	}
	redis := append(args, "-store", "redis", "-redis", srv.Addr)
	for _, tc := range []struct {
		name, password string
		user           []string
		code           int
		want           string // in stderr, for exit 1
	}{
		{"no password", "", nil, 1, "(check -redis-username and the environment variable REDIS_PASSWORD)"},
		{"wrong password", "wrong", nil, 1, "WRONGPASS"},
		{"requirepass", "s3cret", nil, 0, ""},
		{"ACL user", "upw", []string{"-redis-username", "u"}, 0, ""},
		{"ACL user, wrong password", "s3cret", []string{"-redis-username", "u"}, 1, `Redis refused the credentials of user "u"`},
	} {
		t.Setenv("REDIS_PASSWORD", tc.password)
		code, out, errOut := simulateCmd(t, simTrace, append(redis, tc.user...)...)
		if code != tc.code {
			t.Errorf("%s: exit %d, want %d: %s", tc.name, code, tc.code, errOut)
			continue
		}
		if code == 0 && out != mem {
			t.Errorf("%s: -store redis printed\n%s\n-store memory printed\n%s", tc.name, out, mem)
		}
		if code == 1 && (!strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "sluice simulate: -store redis: ")) {
			t.Errorf("%s: stderr %q; want it to say %q", tc.name, errOut, tc.want)
		}
	}
	if n, err := redistest.DoAuth(srv.Addr, "", "s3cret", "DBSIZE"); err != nil || n != "0" {
		t.Errorf("DBSIZE after the runs: %q (%v), want 0 (the runs delete their keys)", n, err)
	}
}

// -redis-db N runs in database N: while a run is going its keys are
// there, database 0 stays empty, and the run deletes them from N when it
// ends. A number that is no database number is refused as
// store.redis.db's is, one past Redis's databases names -redis-db, and
// -redis-db or -redis-username without -store redis is refused.
func TestSimulateRedisDB(t *testing.T) {
	srv := redistest.StartServer(t)
	pr, pw := io.Pipe()
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"simulate", "-rate", "5/7d", "-store", "redis", "-redis", srv.Addr, "-redis-db", "3"}, pr, &out, &errOut)
	}()
	if _, err := io.WriteString(pw, "1,a\n2,b,3\n"); err != nil {
		t.Fatal(err)
	}
	dbsize := func(db int) string {
		n, err := redistest.DoIn(srv.Addr, db, "DBSIZE")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for deadline := time.Now().Add(30 * time.Second); dbsize(3) != "2"; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("database 3 holds %s keys during the run, want 2 (a and b)", dbsize(3))
		}
	}
	if n := dbsize(0); n != "0" {
		t.Errorf("database 0 holds %s keys during a run with -redis-db 3, want 0", n)
	}
	pw.Close()
	if code := <-done; code != 0 {
		t.Fatalf("-redis-db 3: exit %d: %s", code, errOut.String())
	}
	if n := dbsize(3); n != "0" {
		t.Errorf("database 3 holds %s keys after the run, want 0 (deleted)", n)
	}
	if !strings.Contains(out.String(), "2.000000,b,3,1,") {
		t.Errorf("-redis-db 3 printed\n%s\nwant b's request admitted", out.String())
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-store", "redis", "-redis", srv.Addr, "-redis-db", "-1"}, "sluice simulate: -redis-db: -1 is not a database number"},
		{[]string{"-store", "redis", "-redis", srv.Addr, "-redis-db", "1048577"}, "sluice simulate: -redis-db: 1048577 is not a database number"},
		{[]string{"-store", "redis", "-redis", srv.Addr, "-redis-db", "16"}, "Redis has no database 16 (its databases setting, 16 by default, bounds the numbers)"},
		{[]string{"-store", "redis", "-redis", srv.Addr, "-redis-db", "16"}, "(check -redis-db)"},
		{[]string{"-redis-db", "3"}, "sluice simulate: -redis-db: for -store redis only (-store is memory)"},
		{[]string{"-redis-username", "u", "-redis-db", "2"}, "sluice simulate: -redis-db, -redis-username: for -store redis only"},
	} {
		code, out, errOut := simulateCmd(t, "1,a\n", append([]string{"-rate", "5/s"}, tc.args...)...)
		if code != 1 || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 saying %q", tc.args, code, out, errOut, tc.want)
		}
	}
}
