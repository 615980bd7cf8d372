package config

import (
	"strings"
	"testing"
)

// A password inside a URL given where an address or the upstream goes
// (REDIS_URL=redis://:PASSWORD@host:6379 put in store.redis.addrs, an
// upstream with user:password@) is refused, and the problem names the
// file, line and key without the password: problems are printed by
// check-config and logged by every refused reload, where a secret kept
// out of the file (${VAR}) must not end up.
func TestProblemsHideCredentials(t *testing.T) {
	const secret = "hunter2"
	t.Setenv("SLUICE_T_URL", "redis://:"+secret+"@redis.internal:6379")
	t.Setenv("SLUICE_T_UP", "http://bob:"+secret+"@up.internal:9000/x")
	for _, tc := range []struct {
		yaml string
		want string // in the problem
	}{
		{"store:\n  type: redis\n  redis:\n    addrs: [\"${SLUICE_T_URL}\"]\n", "c.yaml:4: store.redis.addrs[0]: "},
		{"store:\n  type: redis\n  redis:\n    addrs: [\"default:" + secret + "@redis.internal:6379\"]\n", "c.yaml:4: store.redis.addrs[0]: "},
		{"store:\n  type: redis\n  redis:\n    addrs: [\"rediss://u:" + secret + "@r:6379/0?x=1\"]\n", "c.yaml:4: store.redis.addrs[0]: "},
		{"proxy:\n  listen: 127.0.0.1:0\n  upstream: ${SLUICE_T_UP}\n", "c.yaml:3: proxy.upstream: "},
		{"proxy:\n  listen: 127.0.0.1:0\n  upstream: http://bob:" + secret + "@up:9000/x?q=1\n", "c.yaml:3: proxy.upstream: "},
		{"proxy:\n  listen: 127.0.0.1:0\n  upstream: \"http://bob:" + secret + "@up :9000/x\"\n", "c.yaml:3: proxy.upstream: "},
		{"proxy:\n  listen: 127.0.0.1:0\n  upstream: ftp://bob:" + secret + "@up:21/\n", "c.yaml:3: proxy.upstream: "},
		{"listen: \"admin:" + secret + "@127.0.0.1:8080\"\n", "c.yaml:1: listen: "},
	} {
		_, err := Parse("c.yaml", []byte(tc.yaml))
		if err == nil {
			t.Errorf("Parse(%q) = nil, want refused", tc.yaml)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, secret) || !strings.Contains(msg, tc.want) {
			t.Errorf("Parse(%q) = %v\nwant a problem at %q without the password %q", tc.yaml, msg, tc.want, secret)
		}
	}
}

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"127.0.0.1:6379", "127.0.0.1:6379"},
		{"redis://:pw@h:6379", "redis://:xxxxx@h:6379"},
		{"redis://u:pw@h:6379/0", "redis://u:xxxxx@h:6379/0"},
		{"redis://:p/w@h:6379", "redis://:xxxxx@h:6379"}, // a / in the password
		{"u:p@w@h:6379", "u:xxxxx@h:6379"},               // an @ in the password
		{"https://token@h/x", "https://xxxxx@h/x"},
		{"http://h/a@b", "http://h/a@b"}, // an @ in the path
		{"", ""},
	} {
		if got := redact(tc.in); got != tc.want {
			t.Errorf("redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// A password written in the file whose characters read as a ${VAR} that
// cannot be expanded (a generated password holding ${) is refused without
// any part of it in the problem, which says where the ${ is and how to
// write it literally.
func TestExpandProblemsHidePasswords(t *testing.T) {
	for _, pw := range []string{"x9${Qz7", "x9${Qz-7}w", "x9${QZSECRETUNSET}w", "x9${QZSECRETUNSET:-${Q}}w"} {
		for _, key := range []string{"password", "sentinel_password"} {
			y := "store:\n  type: redis\n  redis:\n    addrs: [h:1]\n    sentinel: m\n    " + key + ": '" + pw + "'\n"
			_, err := Parse("c.yaml", []byte(y))
			if err == nil {
				t.Errorf("%s %q: parsed, want refused", key, pw)
				continue
			}
			msg := err.Error()
			if !strings.Contains(msg, "c.yaml:6: store.redis."+key+": ") || !strings.Contains(msg, "character 3") || !strings.Contains(msg, "$${") {
				t.Errorf("%s %q: %v\nwant a problem at c.yaml:6 naming character 3 and $${", key, pw, msg)
			}
			for _, part := range []string{"x9", "Qz", "QZSECRET"} {
				if strings.Contains(msg, part) {
					t.Errorf("%s %q: %v\nholds %q, part of the password", key, pw, msg, part)
				}
			}
		}
	}
}
