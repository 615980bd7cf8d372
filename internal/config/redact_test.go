package config

import (
	"path/filepath"
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

// A key naming a secret file (api.token_file, a TLS private key) whose
// value comes from the environment, when the variable holds the secret
// itself rather than a path (API_TOKEN=the token), names no file: the
// problem, printed by check-config and logged by every refused reload,
// names the text written in the config (${API_TOKEN}) instead of the
// path it expands to.
func TestSecretFileFromEnvHidden(t *testing.T) {
	const secret = "s3cr3tTok/en+x"
	t.Setenv("SLUICE_T_TOK", secret)
	t.Setenv("SLUICE_T_KEY", "-----BEGIN PRIVATE KEY-----\nMIIs3cr3tTok\n-----END PRIVATE KEY-----\n")
	dir := t.TempDir()
	cert := filepath.Join(dir, "c.pem")
	mustWriteFile(t, cert, "x")
	tls := "{cert: " + cert + ", key: \"${SLUICE_T_KEY}\"}"
	for _, tc := range []struct{ yaml, want string }{
		{"api:\n  token_file: ${SLUICE_T_TOK}\n", "c.yaml:2: api.token_file: ${SLUICE_T_TOK}: no such file"},
		{"api:\n  token_file: /run/secrets/${SLUICE_T_TOK}\n", "c.yaml:2: api.token_file: /run/secrets/${SLUICE_T_TOK}: no such file"},
		{"api:\n  tls: " + tls + "\n", "c.yaml:2: api.tls.key: ${SLUICE_T_KEY}: no such file"},
		{"proxy:\n  listen: 127.0.0.1:0\n  upstream: http://127.0.0.1:1\n  tls: " + tls + "\n", "c.yaml:4: proxy.tls.key: ${SLUICE_T_KEY}: no such file"},
		{"grpc:\n  listen: 127.0.0.1:0\n  config: [" + dir + "]\n  tls: " + tls + "\n", "c.yaml:4: grpc.tls.key: ${SLUICE_T_KEY}: no such file"},
		{"store:\n  type: redis\n  redis:\n    addrs: [h:1]\n    tls: " + tls + "\n", "c.yaml:5: store.redis.tls.key: ${SLUICE_T_KEY}: no such file"},
	} {
		_, err := Parse("c.yaml", []byte(tc.yaml))
		if err == nil {
			t.Errorf("Parse(%q) = nil, want refused", tc.yaml)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "s3cr3tTok") || !strings.Contains(msg, tc.want) {
			t.Errorf("Parse(%q) = %v\nwant %q, without the secret", tc.yaml, msg, tc.want)
		}
	}
	// A path written out, or from the environment and found, is named
	// as it always was.
	_, err := Parse(filepath.Join(dir, "c.yaml"), []byte("api:\n  token_file: nofile\n"))
	if want := filepath.Join(dir, "nofile") + ": no such file"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("token_file: nofile: %v, want %q", err, want)
	}
}
