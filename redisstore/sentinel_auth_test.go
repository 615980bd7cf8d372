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

// Sentinels may require credentials of their own, other than the
// master's (Options.SentinelCredentials). They got the master's always,
// so a Sentinel with a password of its own could not be used at all.
// Without SentinelCredentials they still get the master's, and a
// Sentinel refusing those is told apart from the master refusing its own
// (SentinelRefused).
func TestSentinelCredentials(t *testing.T) {
	master := redistest.StartServer(t)
	for _, cmd := range [][]string{
		{"ACL", "SETUSER", "lim", "on", ">limpw", "~sluice:*", "+@all"},
		{"CONFIG", "SET", "requirepass", "masterpw"},
	} {
		if _, err := redistest.Do(master.Addr, cmd...); err != nil {
			t.Fatal(err)
		}
	}
	sentinel := redistest.StartSentinelAuth(t, master, "masterpw", "sentpw")
	// allchannels: a Redis 7 user has no channels unless given some
	// (acl-pubsub-default resetchannels), and New refuses a Sentinel
	// user without the failover channels (TestSentinelACLChannels).
	if _, err := redistest.DoAuth(sentinel, "", "sentpw", "ACL", "SETUSER", "watcher", "on", ">watchpw", "+@all", "allchannels"); err != nil {
		t.Fatal(err)
	}
	// A Sentinel that requires no password, for a master that does.
	open := redistest.StartSentinelAuth(t, master, "masterpw", "")
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		o          redisstore.Options
		refused    string // in New's error; "": connects
		bySentinel bool
	}{
		{"own password", redisstore.Options{Addrs: []string{sentinel}, Password: "masterpw", SentinelCredentials: &redisstore.Credentials{Password: "sentpw"}}, "", false},
		{"own users", redisstore.Options{Addrs: []string{sentinel}, Username: "lim", Password: "limpw", SentinelCredentials: &redisstore.Credentials{Username: "watcher", Password: "watchpw"}}, "", false},
		{"none for the Sentinel", redisstore.Options{Addrs: []string{open}, Password: "masterpw", SentinelCredentials: &redisstore.Credentials{}}, "", false},
		{"the master's to the Sentinel", redisstore.Options{Addrs: []string{sentinel}, Password: "masterpw"}, "Sentinel", true},
		{"a wrong one to the Sentinel", redisstore.Options{Addrs: []string{sentinel}, Password: "masterpw", SentinelCredentials: &redisstore.Credentials{Password: "nope"}}, "Sentinel", true},
		{"a wrong one to the master", redisstore.Options{Addrs: []string{sentinel}, Password: "nope", SentinelCredentials: &redisstore.Credentials{Password: "sentpw"}}, "refused the credentials", false},
	} {
		tc.o.Sentinel, tc.o.Timeout = "mymaster", 5*time.Second
		s, err := redisstore.New(ctx, tc.o)
		if tc.refused == "" {
			if err != nil {
				t.Errorf("%s: New: %v; want connected", tc.name, err)
				continue
			}
			r := req("sentinel-creds-"+strings.ReplaceAll(tc.name, " ", "-"), 0)
			if d, err := s.Take(ctx, r); err != nil || !d.Allowed {
				t.Errorf("%s: Take = %+v, %v; want allowed", tc.name, d, err)
			}
			if n, err := redistest.DoAuth(master.Addr, "", "masterpw", "EXISTS", s.KeyOf(&r)); err != nil || n != "1" {
				t.Errorf("%s: EXISTS %s on the master = %q, %v; want 1", tc.name, s.KeyOf(&r), n, err)
			}
			s.Close()
			continue
		}
		if err == nil {
			s.Close()
			t.Errorf("%s: New connected; want ErrAuth", tc.name)
			continue
		}
		if !errors.Is(err, redisstore.ErrAuth) || !strings.Contains(err.Error(), tc.refused) || redisstore.SentinelRefused(err) != tc.bySentinel {
			t.Errorf("%s: New: %v (SentinelRefused %v); want ErrAuth saying %q, SentinelRefused %v", tc.name, err, redisstore.SentinelRefused(err), tc.refused, tc.bySentinel)
		}
	}
}
