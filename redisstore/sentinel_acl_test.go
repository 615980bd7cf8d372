package redisstore_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// A Sentinel user whose ACL lacks a SENTINEL subcommand the client sends
// to find the master (SENTINEL SENTINELS, SENTINEL GET-MASTER-ADDR-BY-NAME)
// or the channels it subscribes to for failovers is refused by the
// Sentinel, not the master. New's error used to blame the master's user
// ("Redis's ACL does not let user "lim" run SENTINEL …"), SentinelRefused
// false; it now names the Sentinel, the Sentinel's user and the command.
func TestSentinelACLRefused(t *testing.T) {
	master := redistest.StartServer(t)
	if _, err := redistest.Do(master.Addr, "ACL", "SETUSER", "lim", "on", ">limpw", "~sluice:*", "+@all"); err != nil {
		t.Fatal(err)
	}
	sentinel := redistest.StartSentinelAuth(t, master, "", "sentpw")
	for _, u := range [][]string{
		{"nomaster", "on", ">pw", "allchannels", "+@all", "-sentinel|get-master-addr-by-name"},
		{"nosentinels", "on", ">pw", "allchannels", "+@all", "-sentinel|sentinels"},
		{"nosentinel", "on", ">pw", "allchannels", "+@all", "-sentinel"},
	} {
		if _, err := redistest.DoAuth(sentinel, "", "sentpw", append([]string{"ACL", "SETUSER"}, u...)...); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	for _, tc := range []struct {
		user, command string
	}{
		{"nomaster", "SENTINEL GET-MASTER-ADDR-BY-NAME"},
		{"nosentinels", "SENTINEL SENTINELS"},
		{"nosentinel", "SENTINEL "},
	} {
		o := redisstore.Options{Addrs: []string{sentinel}, Sentinel: "mymaster", Username: "lim", Password: "limpw",
			SentinelCredentials: &redisstore.Credentials{Username: tc.user, Password: "pw"}, Timeout: 5 * time.Second}
		s, err := redisstore.New(ctx, o)
		if err == nil {
			s.Close()
			t.Errorf("Sentinel user %s: New connected; want ErrAuth", tc.user)
			continue
		}
		msg := err.Error()
		if !errors.Is(err, redisstore.ErrAuth) || !redisstore.SentinelRefused(err) ||
			!strings.Contains(msg, "Sentinel at "+sentinel) || !strings.Contains(msg, `user "`+tc.user+`"`) ||
			!strings.Contains(msg, tc.command) || strings.Contains(msg, `user "lim"`) {
			t.Errorf("Sentinel user %s: New: %v (SentinelRefused %v); want ErrAuth, SentinelRefused, naming the Sentinel at %s, user %q and %s, not the master's user", tc.user, err, redisstore.SentinelRefused(err), sentinel, tc.user, tc.command)
		}
	}
}

// A Sentinel user whose ACL lets it run the SENTINEL commands but not
// subscribe to the channels the client subscribes to for failovers
// (+switch-master and the others of rueidis's listWatch) connected
// without an error, and the Sentinel refused the SUBSCRIBE once: the
// store never heard of a failover and wrote on to the old master (with a
// real master, replica and Sentinel, after SENTINEL FAILOVER: READONLY
// for 60 s and more; with allchannels, decisions on the promoted replica
// 0.5 s after it became master). New now subscribes to those channels on
// each Sentinel with the Sentinel's user and, refused, names the
// Sentinel, the user and the channels refused.
func TestSentinelACLChannels(t *testing.T) {
	master := redistest.StartServer(t)
	sentinel := redistest.StartSentinelAuth(t, master, "", "sentpw")
	all := []string{"+sentinel", "+slave", "-sdown", "+sdown", "+switch-master", "+reboot"}
	var some []string
	for _, c := range all {
		some = append(some, "&"+c)
	}
	for _, u := range [][]string{
		{"nochannels", "on", ">pw", "+@all", "resetchannels"},
		{"noswitch", "on", ">pw", "+@all", "resetchannels", "&+sentinel", "&+slave", "&-sdown", "&+sdown", "&+reboot"},
		{"these", "on", ">pw", "+@all", "resetchannels"},
		{"everything", "on", ">pw", "+@all", "allchannels"},
	} {
		if u[0] == "these" {
			u = append(u, some...)
		}
		if _, err := redistest.DoAuth(sentinel, "", "sentpw", append([]string{"ACL", "SETUSER"}, u...)...); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	for _, tc := range []struct {
		user    string
		refused []string // channels named; nil: connects
	}{
		{"nochannels", all},
		{"noswitch", []string{"+switch-master"}},
		{"these", nil},
		{"everything", nil},
	} {
		o := redisstore.Options{Addrs: []string{sentinel}, Sentinel: "mymaster",
			SentinelCredentials: &redisstore.Credentials{Username: tc.user, Password: "pw"}, Timeout: 5 * time.Second}
		s, err := redisstore.New(ctx, o)
		if tc.refused == nil {
			if err != nil {
				t.Errorf("Sentinel user %s: New: %v; want connected", tc.user, err)
				continue
			}
			r := req("sentinel-channels-"+tc.user, 0)
			if d, err := s.Take(ctx, r); err != nil || !d.Allowed {
				t.Errorf("Sentinel user %s: Take = %+v, %v; want allowed", tc.user, d, err)
			}
			s.Close()
			continue
		}
		if err == nil {
			s.Close()
			t.Errorf("Sentinel user %s: New connected; want ErrAuth naming the channels %v", tc.user, tc.refused)
			continue
		}
		msg := err.Error()
		ok := errors.Is(err, redisstore.ErrAuth) && redisstore.SentinelRefused(err) &&
			strings.Contains(msg, "Sentinel at "+sentinel) && strings.Contains(msg, `user "`+tc.user+`"`)
		for _, c := range all {
			if named := strings.Contains(msg, c); named != slices.Contains(tc.refused, c) {
				ok = false
			}
		}
		if !ok {
			t.Errorf("Sentinel user %s: New: %v (SentinelRefused %v); want ErrAuth, SentinelRefused, naming the Sentinel at %s, user %q and the channels %v only", tc.user, err, redisstore.SentinelRefused(err), sentinel, tc.user, tc.refused)
		}
	}
}
