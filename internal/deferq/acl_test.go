package deferq_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Commands is enough: a user whom Redis's ACL allows exactly those
// commands (and the connection's own), on the queue's keys only, queues,
// delivers, retries, dead-letters and answers Status and Depth. A command
// the list missed fails NOPERM, and the request never settles.
func TestCommandsSuffice(t *testing.T) {
	srv := redistest.StartServer(t)
	c := restrictedClient(t, srv.Addr)
	up := newUpstream(t, func(d delivery, n int) int {
		if d.key == "broken" {
			return http.StatusInternalServerError
		}
		if n == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	q, err := newQueue(deferq.Options{Client: c, Upstream: mustURL(t, up.srv.URL), MaxAttempts: 2, Backoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "hooks"}})
	ok := enqueue(t, q, "hooks", "ok", http.MethodPost, "/a", []byte("a"))
	broken := enqueue(t, q, "hooks", "broken", http.MethodPost, "/b", []byte("b"))
	start(t, q)
	for id, want := range map[string]deferq.Status{ok: {State: "delivered", Status: 200, Attempts: 2}, broken: {State: "dead_lettered", Status: 500, Attempts: 2}} {
		st := awaitState(t, q, id, "delivered", "dead_lettered")
		if st.State != want.State || st.Status != want.Status || st.Attempts != want.Attempts {
			t.Errorf("Status(%s) = %+v, want %+v", id, st, want)
		}
	}
	if _, err := q.Status(context.Background(), deferq.Tag("hooks")+"-00000000000000000000"); err == nil || strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("Status(unknown id) = %v; want unknown, not NOPERM", err)
	}
	if n, _, err := q.Depth(context.Background(), "hooks"); err != nil || n != 0 {
		t.Errorf("Depth = %d, %v; want an empty queue", n, err)
	}
}

// restrictedClient is a client of the Redis at addr as a user whose ACL
// allows exactly deferq.Commands (and the connection's own), on the
// queue's keys only.
func restrictedClient(t *testing.T, addr string) rueidis.Client {
	t.Helper()
	cmds := deferq.Commands(deferq.DefaultPrefix)
	rules := []string{"ACL", "SETUSER", "q", "on", ">pw", "~" + deferq.DefaultPrefix + "*", "-@all", "+@connection"}
	for _, argv := range cmds {
		for _, a := range argv {
			if strings.Contains(a, "KEYS[") || strings.Contains(a, " .. ") {
				t.Errorf("Commands: %q: the key %q is left as the script writes it", argv, a)
			}
		}
		name := strings.ToLower(argv[0])
		if name == "xgroup" || name == "xinfo" {
			name += "|" + strings.ToLower(argv[1])
		}
		rules = append(rules, "+"+name)
	}
	if _, err := redistest.Do(addr, rules...); err != nil {
		t.Fatalf("%s: %v", strings.Join(rules, " "), err)
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, Username: "q", Password: "pw", DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatalf("rueidis as q: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// Commands is enough for the scan for requests an earlier version queued
// too (scan.lua, listed.lua): as the restricted user, an instance indexes
// such a request, held by an instance of that version, and names its
// key's list in its record, and the scan ends.
func TestCommandsSufficeForScan(t *testing.T) {
	srv := redistest.StartServer(t)
	oldRequestIndexed(t, client(t, srv.Addr), restrictedClient(t, srv.Addr))
}
