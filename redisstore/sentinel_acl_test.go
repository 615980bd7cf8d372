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
