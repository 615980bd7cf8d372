package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/daemon"
)

// A daemon on a free port, asked for decisions over its HTTP API, then
// shut down by cancelling its context.
func Example() {
	cfg, err := config.Parse("example.yaml", []byte(`
listen: 127.0.0.1:0
rules:
  - name: per-user
    rate: 2/m
    algorithm: token_bucket
`))
	if err != nil {
		panic(err)
	}
	d, err := daemon.New(cfg, daemon.Options{})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()

	api := "http://" + d.Addrs().API
	for range 3 {
		resp, err := http.Post(api+"/v1/check", "application/json",
			strings.NewReader(`{"rule":"per-user","key":"alice","cost":1}`))
		if err != nil {
			panic(err)
		}
		var a struct {
			Allowed   bool  `json:"allowed"`
			Remaining int64 `json:"remaining"`
		}
		err = json.NewDecoder(resp.Body).Decode(&a)
		resp.Body.Close()
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%v remaining=%d\n", a.Allowed, a.Remaining)
	}
	cancel()
	fmt.Println("Run:", <-done)
	// Output:
	// allowed=true remaining=1
	// allowed=true remaining=0
	// allowed=false remaining=0
	// Run: <nil>
}
