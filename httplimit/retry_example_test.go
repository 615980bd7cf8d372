package httplimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/httplimit"
)

// A client that waits when an API says "too many requests", then tries
// again.
func ExampleRetryTransport() {
	// An API that refuses the first request.
	var calls atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			// Real servers send at least 1 (second); 0 keeps the example quick.
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		io.WriteString(w, "hello\n")
	}))
	defer api.Close()

	client := &http.Client{Transport: &httplimit.RetryTransport{
		MaxAttempts: 3,                // the first attempt and up to two retries
		MaxElapsed:  10 * time.Second, // never wait past 10s in all
	}}
	resp, err := client.Get(api.URL)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d after %d attempts: %s", resp.StatusCode, calls.Load(), body)
	// Output:
	// 200 after 2 attempts: hello
}
