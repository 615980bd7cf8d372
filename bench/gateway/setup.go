package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/sluicehq/sluice/bench/internal/harness"
)

var upstreamBody = []byte("hello from upstream\n")

// upstreamConf is the nginx upstream's http-block body: a fixed small
// body, keep-alive connections never closed by request count (the Go
// upstream does not close them either).
const upstreamConf = `server {
    listen %s;
    keepalive_requests 1000000;
    location / {
        default_type text/plain;
        return 200 "hello from upstream\n";
    }
}
`

// startUpstream starts the trivial upstream the nginx in front proxies
// to, on addr: a second nginx process (kind "nginx") or this program
// again as a net/http server (kind "go").
//
// nginx by default: the upstream stands for an application that is
// usually elsewhere, and it is the same in both configs, but on these 2
// cores its CPU is taken from the processes measured. On this machine the
// Go upstream cost 25–38 µs of CPU per request and was the busiest of the
// four processes (the most run-queue wait per request), nginx returning
// the same body 11 µs.
func startUpstream(ctx context.Context, procs *harness.Procs, kind, dir, addr string) (*harness.Proc, error) {
	var up *harness.Proc
	var err error
	if kind == "nginx" {
		up, err = procs.StartNginx(ctx, filepath.Join(dir, "upstream"), fmt.Sprintf(upstreamConf, addr))
	} else {
		var self string
		if self, err = os.Executable(); err != nil {
			return nil, err
		}
		up, err = procs.Start(ctx, "upstream", self, "upstream", addr)
	}
	if err != nil {
		return nil, err
	}
	return up, harness.WaitListen(ctx, addr, up)
}

// serveUpstream is the Go upstream: a fixed small body.
func serveUpstream(addr string) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write(upstreamBody)
	})
	fmt.Fprintln(os.Stderr, http.ListenAndServe(addr, h))
	os.Exit(1)
}

func replaceAll(s string, oldnew ...string) (string, error) {
	for i := 0; i < len(oldnew); i += 2 {
		if !strings.Contains(s, oldnew[i]) {
			return "", fmt.Errorf("the example has no %q", oldnew[i])
		}
		s = strings.ReplaceAll(s, oldnew[i], oldnew[i+1])
	}
	return s, nil
}
