package daemon

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
)

// TestMemstoreKeysBoundedUnderClients: a client choosing its keys cannot
// grow the memory store past store.max_keys. A real daemon with
// max_keys: 64 gets 4,000 requests, each with a key it has never seen
// (half through the proxy, keyed on a header, half through /v1/check),
// every one of them decided (allowed: a new key has its whole limit);
// after them the store holds at most 64 keys, exactly as
// sluice_memstore_keys says, and sluice_memstore_evictions_total counts
// every key evicted before it was at rest (none is, in its hour: the
// daemon's clock starts at midnight).
func TestMemstoreKeysBoundedUnderClients(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(up.Close)
	const maxKeys = 64
	td := startDaemonAligned(t, fmt.Sprintf(`listen: 127.0.0.1:0
proxy: {listen: 127.0.0.1:0, upstream: %s}
store: {max_keys: %d}
rules:
  - name: per-key
    key: [header:X-Api-Key]
    rate: 2/h
    algorithm: fixed_window
  - name: checked
    match: {path: /not-proxied}
    rate: 2/h
    algorithm: gcra
`, up.URL, maxKeys))
	const n = 4000
	var wg sync.WaitGroup
	next := make(chan int)
	for range 4 {
		wg.Go(func() {
			for i := range next {
				if i%2 == 0 {
					send(t, http.MethodGet, td.proxy+"/", "", "X-Api-Key", "key-"+strconv.Itoa(i))
				} else {
					send(t, http.MethodPost, td.api+"/v1/check", fmt.Sprintf(`{"rule":"checked","key":"k%d"}`, i))
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if t.Failed() {
		return
	}
	m := scrape(t, td.api+"/metrics")
	if got := m["sluice_decisions_total"].value("sluice_decisions_total", "result", "allowed"); got != n {
		t.Fatalf("sluice_decisions_total{result=allowed} = %v, want %d: every request decided on a new key", got, n)
	}
	held := m["sluice_memstore_keys"].value("sluice_memstore_keys")
	if held > maxKeys {
		t.Errorf("sluice_memstore_keys = %v after %d new keys, want at most store.max_keys (%d)", held, n, maxKeys)
	}
	if got := td.d.store.(interface{ Len() int }).Len(); float64(got) != held {
		t.Errorf("the store holds %d keys, sluice_memstore_keys says %v", got, held)
	}
	if got, want := m["sluice_memstore_evictions_total"].value("sluice_memstore_evictions_total"), float64(n)-held; got != want {
		t.Errorf("sluice_memstore_evictions_total = %v after %d new keys with %v held, want %v", got, n, held, want)
	}
	t.Logf("%d new keys: %v held, %v evicted", n, held, float64(n)-held)
}
