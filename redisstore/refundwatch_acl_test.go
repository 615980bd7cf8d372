package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// With Options.PublishRefunds each refund PUBLISHes on RefundChannel: a
// user whom Redis's ACL keeps from it (the command, or the channel:
// Redis 7 gives new users no channel) is refused by New naming PUBLISH,
// rather than connecting and failing every refund NOPERM after giving
// the units back. Without PublishRefunds it is not asked for (and
// nothing publishes: a lease's units given back neither); and
// WatchRefunds' SUBSCRIBE is asked for as a Need (the daemon's).
func TestACLPublishRefunds(t *testing.T) {
	srv := redistest.StartServer(t)
	sub := redisstore.Need{Feature: "the over-limit cache", Commands: [][]string{{"SUBSCRIBE", "sluice:refunds"}}}
	for _, tc := range []struct {
		user    string
		rules   []string
		publish bool
		needs   []redisstore.Need
		want    string // in New's error; "" for none
	}{
		{"pub", []string{"~sluice:*", "+@all", "resetchannels", "&sluice:refunds"}, true, []redisstore.Need{sub}, ""},
		{"nochannel", []string{"~sluice:*", "+@all", "resetchannels"}, true, nil, "PUBLISH on the channel sluice:refunds (for the refunds published"},
		{"nochannelquiet", []string{"~sluice:*", "+@all", "resetchannels"}, false, nil, ""},
		{"otherchannel", []string{"~sluice:*", "+@all", "resetchannels", "&other:*"}, true, nil, "PUBLISH"},
		{"nopublish", []string{"~sluice:*", "+@all", "-publish", "allchannels"}, true, nil, "PUBLISH"},
		{"nosubscribe", []string{"~sluice:*", "+@all", "-subscribe", "allchannels"}, true, []redisstore.Need{sub}, "SUBSCRIBE (for the over-limit cache)"},
	} {
		args := append([]string{"ACL", "SETUSER", tc.user, "on", ">pw"}, tc.rules...)
		if _, err := redistest.Do(srv.Addr, args...); err != nil {
			t.Fatalf("%s: %v", strings.Join(args, " "), err)
		}
		s, err := connect(redisstore.Options{Addrs: []string{srv.Addr}, Username: tc.user, Password: "pw", PublishRefunds: tc.publish, Needs: tc.needs})
		if tc.want != "" {
			if err == nil {
				s.Close()
				t.Errorf("user %s (%s): New connected, want ErrAuth saying %q", tc.user, strings.Join(tc.rules, " "), tc.want)
			} else if !errors.Is(err, redisstore.ErrAuth) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("user %s: New: %v; want ErrAuth saying %q", tc.user, err, tc.want)
			}
			continue
		}
		if err != nil {
			t.Errorf("user %s (%s): New: %v; want connected", tc.user, strings.Join(tc.rules, " "), err)
			continue
		}
		r := sluice.Request{Key: "acl-" + tc.user, Algorithm: sluice.TokenBucket, Limit: sluice.PerMinute(10), Cost: 1, Now: sluicetest.T0}
		if _, err := s.Take(context.Background(), r); err != nil {
			t.Errorf("user %s: Take: %v", tc.user, err)
		}
		if _, err := s.Refund(context.Background(), r); err != nil {
			t.Errorf("user %s: Refund: %v", tc.user, err)
		}
		// A lease's units given back publish as a refund does.
		g, err := s.Lease(context.Background(), r, redisstore.ReturnOp{})
		if err != nil || g.Units != 1 {
			t.Errorf("user %s: Lease = %+v, %v; want 1 unit", tc.user, g, err)
		}
		back := redisstore.ReturnOp{Key: r.Key, Algorithm: r.Algorithm, Limit: r.Limit, Units: 1, Now: r.Now}
		if err := s.Return(context.Background(), []redisstore.ReturnOp{back}); err != nil {
			t.Errorf("user %s: Return: %v", tc.user, err)
		}
		s.Close()
	}
}
