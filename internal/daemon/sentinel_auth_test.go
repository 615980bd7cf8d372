package daemon

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// store.redis.sentinel_username and sentinel_password reach Sentinels
// whose credentials differ from the master's: the daemon finds the master
// through them and counts there. Left out, the Sentinels get the
// master's, and refusing those is a startup error naming the keys.
func TestSentinelOwnCredentials(t *testing.T) {
	master := redistest.StartServer(t)
	if _, err := redistest.Do(master.Addr, "CONFIG", "SET", "requirepass", "masterpw"); err != nil {
		t.Fatal(err)
	}
	sentinel := redistest.StartSentinelAuth(t, master, "masterpw", "sentpw")
	config := func(creds string) string {
		return fmt.Sprintf(`listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], sentinel: mymaster, timeout: 2s, password: masterpw%s}
rules:
  - name: r
    rate: 3/h
`, sentinel, creds)
	}
	td := startDaemon(t, config(", sentinel_password: sentpw"))
	if n := allowedOf(t, td.api, "r", "k", 5); n != 3 {
		t.Errorf("through a Sentinel with its own password: %d of 5 allowed, want 3", n)
	}
	if got := get(t, td.api+"/readyz"); got.status != http.StatusOK {
		t.Errorf("GET /readyz: %d %s, want 200", got.status, got.body)
	}
	if keys, err := redistest.DoAuth(master.Addr, "", "masterpw", "DBSIZE"); err != nil || keys == "0" {
		t.Errorf("DBSIZE on the master = %q, %v: the decisions did not reach it", keys, err)
	}
	for _, creds := range []string{"", ", sentinel_password: wrong"} {
		err := newWith(t, config(creds))
		if err == nil {
			t.Errorf("with%q: started; want the Sentinel's refusal", creds)
			continue
		}
		for _, want := range []string{"Sentinel at " + sentinel, "store.redis.sentinel_password", "WRONGPASS"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("with%q: New: %v; want it to say %q", creds, err, want)
			}
		}
	}
}
