package daemon

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// A daemon process SIGKILLed while clients are sending it deferrable
// requests (enqueues in flight) and while it replays: every request it
// answered 202 reaches the upstream, by the survivor if not by it, at
// most twice (the sends in flight at the kill) and always with its id as
// Idempotency-Key, and reads as delivered. A request whose client got no
// answer (the connection cut by the kill) may have been queued or not:
// if it arrives, it arrives once too.
func TestDeferSIGKILLWhileEnqueuing(t *testing.T) {
	rs := redistest.StartServer(t)
	var mu sync.Mutex
	arrivals := map[string]int{}
	// The replays of tenant "pre" the victim sends are held at the
	// upstream until it is dead: sends in flight at the kill.
	inflight, killed := make(chan string, 100), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := r.Header.Get("Idempotency-Key")
		if k == "" {
			w.WriteHeader(http.StatusOK)
			return
		}
		mu.Lock()
		arrivals[k]++
		first := arrivals[k] == 1
		mu.Unlock()
		if first && r.Header.Get("X-Tenant") == "pre" {
			inflight <- k
			<-killed
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(up.Close)
	t.Cleanup(func() {
		select {
		case <-killed:
		default:
			close(killed)
		}
	})
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	cfg := proxyConfig(up.URL, fmt.Sprintf(`
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
defer:
  claim_idle: 6s          # the survivor takes the victim's requests over 6s after its death
  delivery_timeout: 2900ms # not the 2s default of a 6s claim_idle: a loaded machine's late answer is no resend
rules:
  - name: jobs
    key: ["header:X-Tenant"]
    rate: 20/s
    burst: 1
    algorithm: token_bucket
    action: defer
`, rs.Addr))
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	victim, va := startChildDaemon(t, path)
	var pre []string
	for i := range 6 {
		r := do(t, http.MethodPost, "http://"+va.Proxy+"/jobs", "pre "+strconv.Itoa(i), "X-Tenant", "pre")
		var a struct {
			ID string `json:"deferred_id"`
		}
		if json.Unmarshal([]byte(r.body), &a); r.status == http.StatusAccepted {
			pre = append(pre, a.ID)
		}
	}
	if len(pre) == 0 {
		t.Fatal("no request of tenant pre deferred")
	}
	var held string // a replay of the victim's at the upstream
	select {
	case held = <-inflight:
	case <-time.After(time.Minute):
		t.Fatal("no replay of tenant pre reached the upstream within a minute")
	}
	var (
		amu      sync.Mutex
		accepted []string // ids answered 202
		answered = make(chan struct{}, 1000)
		wg       sync.WaitGroup
	)
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				req, _ := http.NewRequest(http.MethodPost, "http://"+va.Proxy+"/jobs", strings.NewReader("job "+strconv.Itoa(i)))
				req.Header.Set("X-Tenant", "t"+strconv.Itoa(g%3))
				resp, err := hc.Do(req)
				if err != nil {
					return // the victim is gone
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					return
				}
				if resp.StatusCode == http.StatusAccepted {
					var a struct {
						ID string `json:"deferred_id"`
					}
					if json.Unmarshal(b, &a) != nil || a.ID == "" {
						t.Errorf("202 without an id: %s", b)
						return
					}
					amu.Lock()
					accepted = append(accepted, a.ID)
					amu.Unlock()
					select {
					case answered <- struct{}{}:
					default:
					}
				}
			}
		})
	}
	for range 60 { // kill it mid-stream: 60 accepted, senders still sending
		select {
		case <-answered:
		case <-time.After(time.Minute):
			t.Fatal("60 requests not deferred within a minute")
		}
	}
	if err := victim.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	victim.Wait()
	close(killed)
	wg.Wait()
	amu.Lock()
	ids := append(append([]string(nil), accepted...), pre...)
	amu.Unlock()
	mu.Lock()
	atKill := 0
	for _, id := range ids {
		if arrivals[id] > 0 {
			atKill++
		}
	}
	mu.Unlock()
	_, sa := startChildDaemon(t, path)
	waitUntil(t, "every accepted request delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if arrivals[id] == 0 {
				return false
			}
		}
		return true
	})
	for _, id := range ids {
		waitUntil(t, id+" delivered", func() bool {
			r := get(t, "http://"+sa.API+"/v1/deferred/"+id)
			return r.status == http.StatusOK && strings.Contains(r.body, `"state":"delivered"`)
		})
	}
	mu.Lock()
	defer mu.Unlock()
	twice := 0
	for k, n := range arrivals {
		switch {
		case n == 2:
			twice++
		case n > 2:
			t.Errorf("%s reached the upstream %d times", k, n)
		}
	}
	if twice > 16 { // defer.concurrency: the sends in flight at the kill
		t.Errorf("%d requests sent twice, more than the 16 a victim can have in flight", twice)
	}
	if arrivals[held] != 2 {
		t.Errorf("%s, at the upstream unanswered when the victim was killed, arrived %d times; want 2 (the survivor sends it again: the documented window)", held, arrivals[held])
	}
	t.Logf("%d accepted (202) before and around the SIGKILL, %d of them at the upstream before it; %d arrivals in all, %d sent twice", len(ids), atKill, len(arrivals), twice)
}
