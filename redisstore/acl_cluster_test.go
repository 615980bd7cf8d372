package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// Redis Cluster keeps its users per node (ACL SETUSER is not
// propagated), so a user may lack a command on one master only: New
// checks every master, and names the one that refuses. It asked one node
// (the one owning the probe key), and a user crippled on another master
// connected, then failed NOPERM on that master's keys only.
func TestACLClusterEveryMaster(t *testing.T) {
	t.Parallel() // a Cluster of its own: its start overlaps another test
	c := redistest.StartCluster(t)
	setUser := func(addr string, rules ...string) {
		t.Helper()
		args := append([]string{"ACL", "SETUSER", "u", "reset", "on", ">pw", "~sluice:*", "&*", "+@all"}, rules...)
		if _, err := redistest.Do(addr, args...); err != nil {
			t.Fatalf("%s on %s: %v", strings.Join(args, " "), addr, err)
		}
	}
	for i, bad := range c.Addrs {
		for _, a := range c.Addrs {
			setUser(a)
		}
		setUser(bad, "-hset")
		_, err := redisstore.New(context.Background(), redisstore.Options{Addrs: c.Addrs, Cluster: true, Username: "u", Password: "pw", Timeout: 5 * time.Second})
		if err == nil || !errors.Is(err, redisstore.ErrAuth) || !strings.Contains(err.Error(), "HSET") || !strings.Contains(err.Error(), "master "+bad) {
			t.Errorf("master %d (%s) without HSET: New: %v; want ErrAuth naming HSET and %s", i, bad, err, bad)
		}
	}
	// The Cluster's commands: what Ping asks every master (CLUSTER INFO).
	for _, a := range c.Addrs {
		setUser(a)
	}
	setUser(c.Addrs[1], "-cluster|info")
	_, err := redisstore.New(context.Background(), redisstore.Options{Addrs: c.Addrs, Cluster: true, Username: "u", Password: "pw", Timeout: 5 * time.Second})
	if err == nil || !errors.Is(err, redisstore.ErrAuth) || !strings.Contains(err.Error(), "CLUSTER INFO") || !strings.Contains(err.Error(), "master "+c.Addrs[1]) {
		t.Errorf("master %s without CLUSTER INFO: New: %v; want ErrAuth naming CLUSTER INFO and the master", c.Addrs[1], err)
	}
	// Without the slot map (CLUSTER SLOTS) on any node the client cannot
	// route: refused, naming it.
	for _, a := range c.Addrs {
		setUser(a, "-cluster|slots")
	}
	_, err = redisstore.New(context.Background(), redisstore.Options{Addrs: c.Addrs, Cluster: true, Username: "u", Password: "pw", Timeout: 5 * time.Second})
	if err == nil || !errors.Is(err, redisstore.ErrAuth) || !strings.Contains(strings.ToUpper(err.Error()), "CLUSTER SLOTS") {
		t.Errorf("no node allowing CLUSTER SLOTS: New: %v; want ErrAuth naming CLUSTER SLOTS", err)
	}
	// Every master allows it all: connects and decides on each.
	for _, a := range c.Addrs {
		setUser(a)
	}
	s := open(t, redisstore.Options{Addrs: c.Addrs, Cluster: true, Username: "u", Password: "pw"})
	if err := s.Ping(context.Background()); err != nil {
		t.Errorf("Ping with every master allowing the user: %v", err)
	}
}
