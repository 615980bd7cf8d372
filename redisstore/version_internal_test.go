package redisstore

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
)

// compareVersions orders releases, reads "6.2" as "6.2.0", puts an
// unstable build (255.255.255) after every release, and tells what is no
// version as an error naming it.
func TestCompareVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
		bad  string // the version the error names; "": no error
	}{
		{"6.2.0", "6.2", 0, ""},
		{"6.2", "6.2.0", 0, ""},
		{"7.0.15", "6.2", 1, ""},
		{"6.0.16", "6.2", -1, ""},
		{"6.2.14", "6.2", 1, ""},
		{"6.10.0", "6.9.9", 1, ""},
		{"5.0.0", "5.0", 0, ""},
		{"7", "7.0.0", 0, ""},
		{"255.255.255", "7.4.2", 1, ""},
		{"7.2.4", "255.255.255", -1, ""},
		{"", "6.2", 0, `""`},
		{"garbage", "6.2", 0, `"garbage"`},
		{"7.0.15", "six.two", 0, `"six.two"`},
		{"7..1", "6.2", 0, `"7..1"`},
		{"7.0.15.1", "6.2", 0, `"7.0.15.1"`},
		{"-7.0", "6.2", 0, `"-7.0"`},
		{"+7.0", "6.2", 0, `"+7.0"`},
		{"7.0-rc1", "6.2", 0, `"7.0-rc1"`},
		{"99999999999999999999.0", "6.2", 0, `"99999999999999999999.0"`},
	} {
		got, err := compareVersions(tc.a, tc.b)
		if tc.bad != "" {
			if err == nil || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("compareVersions(%q, %q) = %d, %v; want an error naming %s", tc.a, tc.b, got, err, tc.bad)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("compareVersions(%q, %q) = %d, %v; want %d", tc.a, tc.b, got, err, tc.want)
		}
	}
}

// infoVersion reads redis_version, and Valkey's name and own version.
func TestInfoVersion(t *testing.T) {
	for _, tc := range []struct {
		info, redis, str string
	}{
		{"# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\nrun_id:abc\r\n", "7.0.15", "7.0.15"},
		{"# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\n", "7.2.4", "valkey 8.0.1 (redis_version 7.2.4)"},
		{"# Server\r\nredis_version:7.4.0\r\nserver_name:redis\r\n", "7.4.0", "7.4.0"},
		{"# Server\r\nrun_id:abc\r\n", "", ""},
	} {
		v := infoVersion("a:1", tc.info)
		if v.redis != tc.redis || v.String() != tc.str {
			t.Errorf("infoVersion(%q) = %q, %q; want %q, %q", tc.info, v.redis, v.String(), tc.redis, tc.str)
		}
	}
}

// tooOld names each need a server is too old for, the version it needs,
// and every server too old for it (a Cluster node among others); a server
// whose version is none, or no version, is not refused.
func TestTooOld(t *testing.T) {
	deferNeed := Need{Feature: "action: defer", MinRedis: "6.2", MinRedisFor: "XAUTOCLAIM"}
	clock := Need{Feature: "the store on Redis's clock", MinRedis: "5.0", MinRedisFor: "TIME"}
	plain := Need{Feature: "the restart watch"}
	sv := func(addr, v string) serverVersion { return serverVersion{addr: addr, redis: v} }
	for _, tc := range []struct {
		name    string
		servers []serverVersion
		needs   []Need
		want    string // the error's text after the op; "": nil
	}{
		{"new enough", []serverVersion{sv("a:1", "7.0.15")}, []Need{clock, deferNeed, plain}, ""},
		{"exactly", []serverVersion{sv("a:1", "6.2.0")}, []Need{deferNeed}, ""},
		{"unstable", []serverVersion{sv("a:1", "255.255.255")}, []Need{deferNeed}, ""},
		{"valkey", []serverVersion{{addr: "a:1", redis: "7.2.4", name: "valkey", own: "8.0.1"}}, []Need{deferNeed}, ""},
		{"none told", []serverVersion{sv("a:1", "")}, []Need{deferNeed}, ""},
		{"garbage", []serverVersion{sv("a:1", "banana")}, []Need{deferNeed}, ""},
		{"no servers", nil, []Need{deferNeed}, ""},
		{"old", []serverVersion{sv("a:1", "6.0.16")}, []Need{clock, deferNeed, plain},
			`action: defer needs Redis 6.2 or later (XAUTOCLAIM); a:1 runs 6.0.16`},
		{"one node of three", []serverVersion{sv("a:1", "7.0.15"), sv("a:2", "6.0.16"), sv("a:3", "7.0.15")}, []Need{deferNeed},
			`action: defer needs Redis 6.2 or later (XAUTOCLAIM); a:2 runs 6.0.16`},
		{"two nodes", []serverVersion{sv("a:1", "6.0.16"), sv("a:2", "6.2.1"), sv("a:3", "6.0.9")}, []Need{deferNeed},
			`action: defer needs Redis 6.2 or later (XAUTOCLAIM); a:1 runs 6.0.16, a:3 runs 6.0.9`},
		{"two needs", []serverVersion{sv("a:1", "4.0.14")}, []Need{clock, deferNeed},
			`the store on Redis's clock needs Redis 5.0 or later (TIME), action: defer needs Redis 6.2 or later (XAUTOCLAIM); a:1 runs 4.0.14`},
		{"two needs, other nodes", []serverVersion{sv("a:1", "4.0.14"), sv("a:2", "6.0.16")}, []Need{clock, deferNeed},
			`the store on Redis's clock needs Redis 5.0 or later (TIME); a:1 runs 4.0.14; action: defer needs Redis 6.2 or later (XAUTOCLAIM); a:1 runs 4.0.14, a:2 runs 6.0.16`},
	} {
		err := tooOld("connect", []string{"a:1"}, tc.servers, tc.needs)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v; want nil", tc.name, err)
			}
			continue
		}
		if want := "redisstore: connect [a:1]: " + tc.want; err == nil || err.Error() != want {
			t.Errorf("%s:\n got %v\nwant %s", tc.name, err, want)
		}
		if !errors.Is(err, ErrVersion) || !errors.Is(err, sluice.ErrStoreUnavailable) {
			t.Errorf("%s: %v is not ErrVersion and ErrStoreUnavailable", tc.name, err)
		}
	}
}

// parseVersion never panics; what it reads is three numbers that compare
// equal to the version written back out, and to itself.
func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"7.0.15", "6.2", "255.255.255", "", "garbage", "7..1", "-1.0", "+7", "1.2.3.4", "0x7.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseVersion(s)
		if err != nil {
			if !strings.Contains(err.Error(), strconv.Quote(s)) {
				t.Errorf("parseVersion(%q): %v; want it to name the version", s, err)
			}
			return
		}
		back := fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2])
		if c, err := compareVersions(s, back); err != nil || c != 0 {
			t.Errorf("compareVersions(%q, %q) = %d, %v; want 0", s, back, c, err)
		}
	})
}
