package daemon

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// tokenConfig is a config whose api.token_file is token, with the rules
// given.
func tokenConfig(token, rules string) string {
	return "listen: 127.0.0.1:0\napi:\n  token_file: " + token + "\nrules:\n" + rules
}

// checkWith calls POST /v1/check with the bearer token and returns the
// status.
func checkWith(t *testing.T, td *testDaemon, token string) int {
	t.Helper()
	return do(t, http.MethodPost, td.api+"/v1/check", `{"rule":"keep","key":"k"}`,
		"Content-Type", "application/json", "Authorization", "Bearer "+token).status
}

// TestTokenFileRotated: api.token_file replaced (a Kubernetes Secret's
// ..data swap, a rename by a secrets agent) puts the new token in force
// without a restart or a SIGHUP, as a renewed certificate is.
func TestTokenFileRotated(t *testing.T) {
	secrets := t.TempDir()
	token := filepath.Join(secrets, "api-token")
	mustWrite(t, token, "first-token\n")
	td := startDaemon(t, tokenConfig(token, "  - {name: keep, rate: 100/m}\n"))
	if got := checkWith(t, td, "first-token"); got != http.StatusOK {
		t.Fatalf("with the first token: %d, want 200", got)
	}
	replaceFile(t, token, "second-token\n")
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("reload after the token file changed: %v", r.Err)
	}
	if got := checkWith(t, td, "second-token"); got != http.StatusOK {
		t.Errorf("with the new token: %d, want 200", got)
	}
	if got := checkWith(t, td, "first-token"); got != http.StatusUnauthorized {
		t.Errorf("with the old token: %d, want 401", got)
	}
}

// TestConfigRefusedOverTokenRetried: a config change refused because the
// token file was not whole yet (a deploy writing both) is applied once the
// token file is, not left refused until the next edit of the config.
func TestConfigRefusedOverTokenRetried(t *testing.T) {
	secrets := t.TempDir()
	token := filepath.Join(secrets, "api-token")
	mustWrite(t, token, "first-token\n")
	td := startDaemon(t, tokenConfig(token, "  - {name: keep, rate: 100/m}\n"))

	mustWrite(t, token, "")
	mustWrite(t, td.path, tokenConfig(token, "  - {name: keep, rate: 100/m}\n  - {name: added, rate: 1/s}\n"))
	if err := td.d.Reload(); err == nil || !strings.Contains(err.Error(), "token_file") {
		t.Fatalf("Reload with an empty token file: %v, want refused naming token_file", err)
	}
	replaceFile(t, token, "second-token\n")
	for {
		if r := td.waitReload(); r.Err != nil {
			continue // an attempt still seeing the empty file
		}
		if strings.Contains(rulesWith(t, td, "second-token"), `"added"`) {
			return
		}
	}
}

// rulesWith is GET /v1/rules with the bearer token.
func rulesWith(t *testing.T, td *testDaemon, token string) string {
	t.Helper()
	return get(t, td.api+"/v1/rules", "Authorization", "Bearer "+token).body
}

// TestTokenFileFromEnvNotLogged: a config whose api.token_file takes a
// variable that holds the token itself, not a path, is refused, and
// neither the error nor the refused reload's log line holds the token:
// they name the text written (${VAR}) instead.
func TestTokenFileFromEnvNotLogged(t *testing.T) {
	const secret = "tok-in-env-9f3a"
	t.Setenv("SLUICE_T_API_TOKEN", secret)
	token := filepath.Join(t.TempDir(), "api-token")
	mustWrite(t, token, "first-token\n")
	td := startDaemon(t, tokenConfig(token, "  - {name: keep, rate: 100/m}\n"))

	mustWrite(t, td.path, tokenConfig("${SLUICE_T_API_TOKEN}", "  - {name: keep, rate: 100/m}\n"))
	err := td.d.Reload()
	if err == nil || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "api.token_file: ${SLUICE_T_API_TOKEN}: no such file") {
		t.Fatalf("Reload = %v, want refused at api.token_file naming ${SLUICE_T_API_TOKEN}, not the token", err)
	}
	logs := td.logs.String()
	if strings.Contains(logs, secret) || !strings.Contains(logs, "${SLUICE_T_API_TOKEN}") {
		t.Errorf("logs hold the token, or lack the refused reload naming ${SLUICE_T_API_TOKEN}:\n%s", logs)
	}
}
