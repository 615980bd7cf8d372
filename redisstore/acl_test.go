package redisstore_test

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// A user whom Redis's ACL keeps from what the store runs (scripts, the
// keys under the prefix, a command the scripts call) is refused by New
// with ErrAuth saying what is missing. It used to connect and then fail
// every decision with NOPERM, as a store error: the daemon answered each
// per on_error (by default letting it through) and /readyz passed. A user
// allowed what the store needs connects and decides.
func TestACLPermissions(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, tc := range []struct {
		user      string
		rules     []string
		redisTime bool   // Options.RedisTime: the scripts read Redis's TIME
		want      string // in New's error; "" for none
	}{
		{"full", []string{"~sluice:*", "+@all"}, false, ""},
		{"needed", []string{"~sluice:*", "+@scripting", "+get", "+set", "+del", "+pexpire", "+pttl", "+hget", "+hmget", "+hset", "+hdel", "+hgetall", "+hincrby", "+time", "+ping", "+hello", "+client", "+info"}, false, ""},
		{"noscript", []string{"~sluice:*", "+@all", "-@scripting"}, false, "'eval"},
		{"otherkeys", []string{"~other:*", "+@all"}, false, "keys"},
		{"noset", []string{"~sluice:*", "+@all", "-set"}, false, "SET"},
		{"notime", []string{"~sluice:*", "+@all", "-time"}, true, "TIME"},
		// Without Options.RedisTime the scripts never run TIME.
		{"notimeclient", []string{"~sluice:*", "+@all", "-time"}, false, ""},
		{"nohget", []string{"~sluice:*", "+@all", "-hget"}, false, "HGET"},
	} {
		args := append([]string{"ACL", "SETUSER", tc.user, "on", ">pw"}, tc.rules...)
		if _, err := redistest.Do(srv.Addr, args...); err != nil {
			t.Fatalf("%s: %v", strings.Join(args, " "), err)
		}
		s, err := connect(redisstore.Options{Addrs: []string{srv.Addr}, Username: tc.user, Password: "pw", RedisTime: tc.redisTime})
		if tc.want != "" {
			if err == nil {
				s.Close()
				t.Errorf("user %s (%s): New connected, want ErrAuth saying %q", tc.user, strings.Join(tc.rules, " "), tc.want)
				continue
			}
			if !errors.Is(err, redisstore.ErrAuth) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `"`+tc.user+`"`) {
				t.Errorf("user %s: New: %v; want ErrAuth naming the user and %q", tc.user, err, tc.want)
			}
			continue
		}
		if err != nil {
			t.Errorf("user %s (%s): New: %v; want connected", tc.user, strings.Join(tc.rules, " "), err)
			continue
		}
		for _, alg := range sluice.Algorithms() {
			r := sluice.Request{Key: "acl-" + tc.user + "-" + alg.String(), Algorithm: alg, Limit: sluice.PerMinute(10), Cost: 1, Now: sluicetest.T0}
			if d, err := s.Take(context.Background(), r); err != nil || !d.Allowed {
				t.Errorf("user %s: Take %s: %+v, %v; want allowed", tc.user, alg, d, err)
			}
		}
		s.Close()
	}
}

// A user whose ACL loses what the store needs while it runs (ACL SETUSER
// -@scripting) fails Ping with ErrAuth: every decision then fails NOPERM,
// and a Ping that only said PING kept /readyz passing and the fallback of
// on_error: local going back to Redis every probe. Ping passes again once
// the user may run the scripts.
func TestACLLostWhileRunning(t *testing.T) {
	srv := redistest.StartServer(t)
	if _, err := redistest.Do(srv.Addr, "ACL", "SETUSER", "ops", "on", ">pw", "~sluice:*", "+@all"); err != nil {
		t.Fatal(err)
	}
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}, Username: "ops", Password: "pw"})
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if _, err := redistest.Do(srv.Addr, "ACL", "SETUSER", "ops", "-@scripting"); err != nil {
		t.Fatal(err)
	}
	r := sluice.Request{Key: "lost", Algorithm: sluice.GCRA, Limit: sluice.PerMinute(10), Cost: 1, Now: sluicetest.T0}
	if _, err := s.Take(ctx, r); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("Take without scripting: %v, want NOPERM", err)
	}
	if err := s.Ping(ctx); !errors.Is(err, redisstore.ErrAuth) || !errors.Is(err, sluice.ErrStoreUnavailable) || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("Ping without scripting: %v; want ErrAuth (and ErrStoreUnavailable) with Redis's NOPERM", err)
	}
	if _, err := redistest.Do(srv.Addr, "ACL", "SETUSER", "ops", "+@scripting"); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Errorf("Ping with scripting again: %v", err)
	}
	if d, err := s.Take(ctx, r); err != nil || !d.Allowed {
		t.Errorf("Take with scripting again: %+v, %v", d, err)
	}
}

// TLS to a port that serves Redis in plain text: New's error says that the
// TLS handshake is what failed. A plain Redis reads a TLS client hello as
// an inline command and, unless the hello happens to hold a newline
// (then the reply is not TLS: ErrTLS), never answers it: New timed out
// with "context deadline exceeded" alone, as if Redis were down.
func TestTLSToPlainPort(t *testing.T) {
	t.Parallel() // a server of its own; it waits on New's timeouts
	srv := redistest.StartServer(t)
	// upTimeout, not 100ms: the timeout bounds the TCP dial too, which a
	// loaded machine can miss (then the error is the dial's); the hello
	// still goes unanswered until New's own bound.
	for range 3 { // the client hello is random: both outcomes, likely
		_, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr}, TLS: &tls.Config{InsecureSkipVerify: true}, Timeout: upTimeout})
		if err == nil || !strings.Contains(err.Error(), "TLS handshake") || !errors.Is(err, sluice.ErrStoreUnavailable) {
			t.Errorf("New with TLS to a plain port: %v; want an unavailable store whose error names the TLS handshake", err)
		}
	}
}

// No TLS to a port that serves only TLS: a TLS Redis reads the client's
// first command as a broken client hello and resets the connection
// without a byte of reply, so New failed with "connection reset by peer"
// alone, as if Redis were flaky. Now it tries a TLS handshake there, and
// when one is answered, fails with ErrTLS saying the port serves TLS.
func TestPlainToTLSPort(t *testing.T) {
	srv := tlstest.NewCA(t, "redis-ca").Server(t)
	rs := redistest.StartTLSServer(t, srv.CertFile, srv.KeyFile)
	_, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{rs.TLSAddr}, Timeout: time.Second})
	if err == nil || !errors.Is(err, redisstore.ErrTLS) || !errors.Is(err, sluice.ErrStoreUnavailable) ||
		!strings.Contains(err.Error(), rs.TLSAddr+" serves TLS") {
		t.Fatalf("New without TLS to a TLS port: %v; want ErrTLS, an unavailable store, and an error saying %s serves TLS", err, rs.TLSAddr)
	}
	// The plain port of the same server: connects.
	s, err := connect(redisstore.Options{Addrs: []string{rs.Addr}}) // open's generous timeout: it must connect
	if err != nil {
		t.Fatalf("New without TLS to the plain port: %v", err)
	}
	s.Close()
}

// Options.Needs: what a caller runs besides the store's scripts (the
// daemon's deferral streams, its hot-key sets, INFO) is checked too, and
// a user lacking one of those commands is refused by New with ErrAuth
// naming the command and the feature; a command no Need names is not
// asked for.
func TestACLNeeds(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, u := range [][]string{
		{"noread", "-xreadgroup"},
		{"noinfo", "-info"},
	} {
		args := append([]string{"ACL", "SETUSER", u[0], "on", ">pw", "~sluice:*", "+@all"}, u[1:]...)
		if _, err := redistest.Do(srv.Addr, args...); err != nil {
			t.Fatal(err)
		}
	}
	deferNeed := redisstore.Need{Feature: "action: defer", Commands: [][]string{
		{"XADD", "sluice:defer:{t}:q"},
		{"XREADGROUP", "GROUP", "g", "c", "STREAMS", "sluice:defer:{t}:q", ">"},
	}}
	infoNeed := redisstore.Need{Feature: "the restart watch", Commands: [][]string{{"INFO", "server"}}}
	otherKeys := redisstore.Need{Feature: "elsewhere", Commands: [][]string{{"XADD", "other:q"}}}
	for _, tc := range []struct {
		user  string
		needs []redisstore.Need
		want  []string // in New's error; none: connects
	}{
		{"noread", []redisstore.Need{infoNeed, deferNeed}, []string{"XREADGROUP", "action: defer"}},
		{"noread", []redisstore.Need{infoNeed}, nil},
		{"noinfo", []redisstore.Need{deferNeed, infoNeed}, []string{"INFO", "the restart watch"}},
		{"noinfo", []redisstore.Need{deferNeed}, nil},
		{"noinfo", []redisstore.Need{otherKeys}, []string{"XADD", "other:q", "elsewhere"}},
	} {
		s, err := connect(redisstore.Options{Addrs: []string{srv.Addr}, Username: tc.user, Password: "pw", Needs: tc.needs})
		if tc.want == nil {
			if err != nil {
				t.Errorf("user %s, needs %v: New: %v; want connected", tc.user, tc.needs, err)
			} else {
				s.Close()
			}
			continue
		}
		if err == nil {
			s.Close()
			t.Errorf("user %s, needs %v: New connected; want ErrAuth naming %q", tc.user, tc.needs, tc.want)
			continue
		}
		if !errors.Is(err, redisstore.ErrAuth) || !strings.Contains(err.Error(), `"`+tc.user+`"`) {
			t.Errorf("user %s: New: %v; want ErrAuth naming the user", tc.user, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("user %s: New: %v; want it to name %q", tc.user, err, w)
			}
		}
		// The scripts' commands are allowed: only the feature is named.
		if strings.Contains(err.Error(), "the store's scripts") {
			t.Errorf("user %s: New: %v; names the store's scripts, which the user may run", tc.user, err)
		}
	}
}

// Require checks needs that came after New (a reload's new features): a
// user lacking one of their commands gets ErrAuth naming it, and Ping
// goes on checking the needs it had; needs the user may run become those
// Ping checks.
func TestACLRequire(t *testing.T) {
	srv := redistest.StartServer(t)
	if _, err := redistest.Do(srv.Addr, "ACL", "SETUSER", "ops", "on", ">pw", "~sluice:*", "+@all", "-xreadgroup"); err != nil {
		t.Fatal(err)
	}
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}, Username: "ops", Password: "pw"})
	ctx := context.Background()
	read := redisstore.Need{Feature: "reading", Commands: [][]string{{"XREADGROUP", "GROUP", "g", "c", "STREAMS", "sluice:q", ">"}}}
	add := redisstore.Need{Feature: "adding", Commands: [][]string{{"XADD", "sluice:q"}}}
	if err := s.Require(ctx, []redisstore.Need{add, read}); !errors.Is(err, redisstore.ErrAuth) || !strings.Contains(err.Error(), "XREADGROUP (for reading)") {
		t.Errorf("Require without XREADGROUP: %v; want ErrAuth naming XREADGROUP and its feature", err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Errorf("Ping after the refused Require: %v; want the needs as they were", err)
	}
	if err := s.Require(ctx, []redisstore.Need{add}); err != nil {
		t.Errorf("Require(XADD): %v", err)
	}
	if _, err := redistest.Do(srv.Addr, "ACL", "SETUSER", "ops", "-xadd"); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); !errors.Is(err, redisstore.ErrAuth) || !strings.Contains(err.Error(), "XADD (for adding)") {
		t.Errorf("Ping once XADD is taken away: %v; want ErrAuth naming XADD, which Require made a need", err)
	}
}
