package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// New reads the server's version (7.0.15 here, where the tests run) and
// refuses a need for a newer one with ErrVersion, naming the feature, the
// version it needs, what needs it and the version found; a need the
// server meets, or the store's own (Redis 5.0 with RedisTime), passes.
// Require checks new needs the same way and, refusing them, keeps the
// needs it had. A need whose version is no version is an error of the
// options.
func TestVersionNeeds(t *testing.T) {
	srv := redistest.StartServer(t)
	info, err := redistest.Do(srv.Addr, "INFO", "server")
	if err != nil {
		t.Fatal(err)
	}
	var real string
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, "redis_version:"); ok {
			real = strings.TrimSpace(v)
		}
	}
	future := redisstore.Need{Feature: "a feature from the future", MinRedis: "256.0", MinRedisFor: "TIMETRAVEL"}
	met := redisstore.Need{Feature: "streams", MinRedis: "5.0", MinRedisFor: "XADD"}
	_, err = connect(redisstore.Options{Addrs: []string{srv.Addr}, RedisTime: true, Needs: []redisstore.Need{met, future}})
	want := "a feature from the future needs Redis 256.0 or later (TIMETRAVEL); " + srv.Addr + " runs " + real
	if !errors.Is(err, redisstore.ErrVersion) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "streams") {
		t.Errorf("New with a need for Redis 256.0: %v; want ErrVersion naming %q only", err, want)
	}
	if redisstore.StoreTooOld(err) {
		t.Errorf("New with a need for Redis 256.0: StoreTooOld; want it false (leaving the need out mends it)")
	}
	// A server too old for the store's own scripts: StoreTooOld, whatever
	// the needs.
	_, err = connect(redisstore.Options{Addrs: []string{redistest.NewOlder(t, srv.Addr, "4.0.14").Addr}, RedisTime: true, Needs: []redisstore.Need{met}})
	if !errors.Is(err, redisstore.ErrVersion) || !redisstore.StoreTooOld(err) {
		t.Errorf("New with RedisTime on Redis 4.0: %v; want ErrVersion, StoreTooOld", err)
	}

	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}, RedisTime: true, Needs: []redisstore.Need{met}})
	ctx := context.Background()
	if err := s.Require(ctx, []redisstore.Need{met, future}); !errors.Is(err, redisstore.ErrVersion) || !strings.Contains(err.Error(), want) {
		t.Errorf("Require of a need for Redis 256.0: %v; want ErrVersion naming %q", err, want)
	}
	if err := s.Require(ctx, []redisstore.Need{met}); err != nil {
		t.Errorf("Require of a need the server meets: %v", err)
	}

	bad := redisstore.Need{Feature: "typo", MinRedis: "six.two"}
	if err := (redisstore.Options{Addrs: []string{srv.Addr}, Needs: []redisstore.Need{bad}}).Validate(); err == nil || !strings.Contains(err.Error(), `"six.two"`) || !strings.Contains(err.Error(), "typo") {
		t.Errorf("Validate with MinRedis six.two: %v; want an error naming it and its feature", err)
	}
	if err := s.Require(ctx, []redisstore.Need{bad}); err == nil || !strings.Contains(err.Error(), `"six.two"`) || errors.Is(err, redisstore.ErrVersion) {
		t.Errorf("Require with MinRedis six.two: %v; want an error naming it (no ErrVersion)", err)
	}
}

// On a Cluster New reads the version of every node, and names each one
// too old.
func TestVersionNeedsCluster(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	future := redisstore.Need{Feature: "a feature from the future", MinRedis: "256.0", MinRedisFor: "TIMETRAVEL"}
	_, err := connect(redisstore.Options{Addrs: c.Addrs[:1], Cluster: true, Needs: []redisstore.Need{future}})
	if !errors.Is(err, redisstore.ErrVersion) {
		t.Fatalf("New on a Cluster with a need for Redis 256.0: %v; want ErrVersion", err)
	}
	for _, a := range c.Addrs {
		if !strings.Contains(err.Error(), a+" runs ") {
			t.Errorf("New on a Cluster with a need for Redis 256.0: %v; want it to name node %s", err, a)
		}
	}
	open(t, redisstore.Options{Addrs: c.Addrs[:1], Cluster: true, RedisTime: true,
		Needs: []redisstore.Need{{Feature: "streams", MinRedis: "5.0", MinRedisFor: "XADD"}}})
}
