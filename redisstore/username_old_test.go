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

// A username given to a Redis older than 6.0 (no ACL users: its AUTH
// takes the password alone) is ErrVersion naming the username, the
// version it needs and Redis's answer: that server refuses the
// connection's AUTH before INFO can tell its version, and the raw
// "wrong number of arguments" used to pass for an outage. The password
// alone still connects there. Redis here is 7.0.15; a relay answers HELLO
// and AUTH with a username as Redis 5.0 does.
func TestUsernameBeforeRedis6(t *testing.T) {
	srv := redistest.StartServer(t)
	five := redistest.NewOlder(t, srv.Addr, "5.0.14")
	for _, cmd := range [][]string{
		{"ACL", "SETUSER", "u", "on", ">pw", "~*", "&*", "+@all"},
		{"CONFIG", "SET", "requirepass", "s3cret"},
	} {
		if _, err := redistest.Do(srv.Addr, cmd...); err != nil {
			t.Fatal(err)
		}
	}
	_, err := connect(redisstore.Options{Addrs: []string{five.Addr}, Username: "u", Password: "pw", RedisTime: true})
	want := []string{`username "u" needs Redis 6.0 or later`, "wrong number of arguments for 'auth' command"}
	if tooOld, sentinel := redisstore.UsernameTooOld(err); !tooOld || sentinel || !errors.Is(err, redisstore.ErrVersion) {
		t.Fatalf("New with a username on Redis 5.0: %v; want ErrVersion, UsernameTooOld of the master", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("New with a username on Redis 5.0: %v; want it to say %q", err, w)
		}
	}
	s := open(t, redisstore.Options{Addrs: []string{five.Addr}, Password: "s3cret", RedisTime: true})
	if err := s.Ping(context.Background()); err != nil {
		t.Errorf("Ping with the password alone on Redis 5.0: %v", err)
	}
}

// A store connected with a username, whose Redis is then replaced by one
// older than 6.0 (a failover to an old replica, an address moved), tells
// so from Ping and Require (the daemon's /readyz and reload): ErrVersion
// naming the username, not the raw AUTH error of each reconnection.
func TestUsernameBeforeRedis6Later(t *testing.T) {
	srv := redistest.StartServer(t)
	five := redistest.NewOlder(t, srv.Addr, "5.0.14")
	if _, err := redistest.Do(srv.Addr, "ACL", "SETUSER", "u", "on", ">pw", "~*", "&*", "+@all"); err != nil {
		t.Fatal(err)
	}
	sw := redistest.NewSwitch(t, srv.Addr)
	s := open(t, redisstore.Options{Addrs: []string{sw.Addr}, Username: "u", Password: "pw", RedisTime: true})
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	sw.To(five.Addr)
	// The first Ping may meet the connection the switch closed.
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		err = s.Ping(ctx)
		if tooOld, _ := redisstore.UsernameTooOld(err); tooOld || time.Now().After(deadline) {
			break
		}
	}
	if !errors.Is(err, redisstore.ErrVersion) || !strings.Contains(err.Error(), `username "u" needs Redis 6.0 or later`) {
		t.Errorf("Ping on Redis 5.0 with a username: %v; want ErrVersion naming it", err)
	}
	err = s.Require(ctx, nil)
	if tooOld, _ := redisstore.UsernameTooOld(err); !tooOld || !strings.Contains(err.Error(), "redisstore: require") {
		t.Errorf("Require on Redis 5.0 with a username: %v; want UsernameTooOld", err)
	}
}

// A Sentinel older than 6.2 has no ACL users: given a username (the
// Sentinels' own, or the master's, which they get by default), Sentinel
// 5.0 answers AUTH with a username as a wrong number of arguments. New
// then names the Sentinel, the username and the version Sentinel users
// need (UsernameTooOld of a Sentinel), not the master. Redis here is
// 7.0.15; a relay answers HELLO and AUTH with a username as 5.0 does.
func TestUsernameBeforeSentinel62(t *testing.T) {
	master := redistest.StartServer(t)
	sentinel := redistest.StartSentinel(t, master)
	five := redistest.NewOlder(t, sentinel, "5.0.14")
	if _, err := redistest.Do(master.Addr, "ACL", "SETUSER", "u", "on", ">pw", "~*", "&*", "+@all"); err != nil {
		t.Fatal(err)
	}
	for _, o := range []redisstore.Options{
		{Username: "u", Password: "pw"},
		{SentinelCredentials: &redisstore.Credentials{Username: "watcher", Password: "wpw"}},
	} {
		o.Addrs, o.Sentinel, o.RedisTime = []string{five.Addr}, "mymaster", true
		user := o.Username
		if o.SentinelCredentials != nil {
			user = o.SentinelCredentials.Username
		}
		_, err := connect(o)
		tooOld, sentinel := redisstore.UsernameTooOld(err)
		if !tooOld || !sentinel || !errors.Is(err, redisstore.ErrVersion) {
			t.Errorf("New with Sentinel user %q on a Sentinel 5.0: %v; want ErrVersion, UsernameTooOld of a Sentinel", user, err)
			continue
		}
		for _, w := range []string{`the Sentinels' username "` + user + `" needs Sentinels of Redis 6.2 or later`, "the Sentinel at " + five.Addr, "wrong number of arguments for 'auth' command"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("New with Sentinel user %q on a Sentinel 5.0: %v; want it to say %q", user, err, w)
			}
		}
	}
	// No username: the Sentinel 5.0 is no obstacle.
	s := open(t, redisstore.Options{Addrs: []string{five.Addr}, Sentinel: "mymaster", RedisTime: true})
	if err := s.Ping(context.Background()); err != nil {
		t.Errorf("Ping through a Sentinel 5.0 without a username: %v", err)
	}
}

// Redis 5's refusals of a password are ErrAuth, as Redis 6's WRONGPASS
// is: "ERR invalid password" (a wrong one) and "ERR Client sent AUTH,
// but no password is set" (one Redis has none for). rueidis drops the
// "ERR " of an error, so the store's match of those words never matched,
// and both passed for an outage. Through a relay that words them as
// Redis 5.0 does, in front of Redis 7.0.15.
func TestPasswordBeforeRedis6(t *testing.T) {
	srv := redistest.StartServer(t)
	five := redistest.NewOlder(t, srv.Addr, "5.0.14")
	_, err := connect(redisstore.Options{Addrs: []string{five.Addr}, Password: "pw", RedisTime: true})
	if !errors.Is(err, redisstore.ErrAuth) || !strings.Contains(err.Error(), "Client sent AUTH, but no password is set") {
		t.Errorf("New with a password on Redis 5.0 that has none: %v; want ErrAuth with Redis's words", err)
	}
	if _, err := redistest.Do(srv.Addr, "CONFIG", "SET", "requirepass", "s3cret"); err != nil {
		t.Fatal(err)
	}
	_, err = connect(redisstore.Options{Addrs: []string{five.Addr}, Password: "wrong", RedisTime: true})
	if !errors.Is(err, redisstore.ErrAuth) || !strings.Contains(err.Error(), "invalid password") {
		t.Errorf("New with a wrong password on Redis 5.0: %v; want ErrAuth with Redis's words", err)
	}
}

// A Sentinel of Redis 6.0 or 6.1 has ACL users in name only: its HELLO
// authenticates against the default user alone, so any other username is
// answered WRONGPASS, as a wrong password is, and New used to report
// refused credentials. When that Sentinel tells its version (INFO server,
// asked without credentials), New names it as ErrVersion of the Sentinel,
// as for a Sentinel 5.0; when it cannot tell (it asks for a password
// first), the refusal of the credentials says that a Sentinel before 6.2
// takes no username. A Sentinel recent enough that refuses a user it
// lacks is refused credentials, as before. Redis here is 7.0.15; a relay
// makes the Sentinel's INFO tell 6.0.16.
func TestUsernameBeforeSentinel62WrongPass(t *testing.T) {
	master := redistest.StartServer(t)
	if _, err := redistest.Do(master.Addr, "ACL", "SETUSER", "u", "on", ">pw", "~*", "&*", "+@all"); err != nil {
		t.Fatal(err)
	}
	sentinel := redistest.StartSentinel(t, master)
	six := redistest.NewOlder(t, sentinel, "6.0.16")
	o := redisstore.Options{Addrs: []string{six.Addr}, Sentinel: "mymaster", Username: "u", Password: "pw", RedisTime: true}
	_, err := connect(o)
	if tooOld, bySentinel := redisstore.UsernameTooOld(err); !tooOld || !bySentinel || !errors.Is(err, redisstore.ErrVersion) || errors.Is(err, redisstore.ErrAuth) {
		t.Fatalf("New with a username through a Sentinel 6.0: %v; want ErrVersion, UsernameTooOld of a Sentinel", err)
	}
	for _, w := range []string{`the Sentinels' username "u" needs Sentinels of Redis 6.2 or later`, "the Sentinel at " + six.Addr + " runs 6.0.16", "WRONGPASS"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("New with a username through a Sentinel 6.0: %v; want it to say %q", err, w)
		}
	}

	// The same Sentinel as it is (7.0): it lacks user u, a refusal of
	// the credentials.
	o.Addrs = []string{sentinel}
	_, err = connect(o)
	if tooOld, _ := redisstore.UsernameTooOld(err); tooOld || !errors.Is(err, redisstore.ErrAuth) || strings.Contains(err.Error(), "before 6.2") {
		t.Errorf("New with a username a Sentinel 7.0 lacks: %v; want ErrAuth, no word of versions", err)
	}

	// A Sentinel 6.0 that asks for a password cannot tell its version:
	// the refusal says what may be the cause.
	lockedSentinel := redistest.StartSentinel(t, master)
	locked := redistest.NewOlder(t, lockedSentinel, "6.0.16")
	if _, err := redistest.Do(lockedSentinel, "ACL", "SETUSER", "default", "resetpass", ">spw"); err != nil {
		t.Fatal(err)
	}
	o.Addrs = []string{locked.Addr}
	o.SentinelCredentials = &redisstore.Credentials{Username: "watcher", Password: "spw"}
	_, err = connect(o)
	if tooOld, _ := redisstore.UsernameTooOld(err); tooOld || !redisstore.SentinelRefused(err) ||
		!strings.Contains(err.Error(), "a Sentinel before 6.2 takes no username: check the Sentinel's version, and the credentials") {
		t.Errorf("New with a username through a Sentinel 6.0 that asks for a password: %v; want ErrAuth of the Sentinel saying a Sentinel before 6.2 takes no username", err)
	}
}
