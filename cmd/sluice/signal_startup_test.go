package main

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// silentRedis accepts connections and answers nothing, so that `sluice
// serve` with store.type: redis stays in its startup, dialling, until
// the test lets go.
type silentRedis struct {
	ln       net.Listener
	accepted chan struct{} // closed at the first connection
	mu       sync.Mutex
	conns    []net.Conn
}

func startSilentRedis(t *testing.T) *silentRedis {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &silentRedis{ln: ln, accepted: make(chan struct{})}
	go func() {
		var once sync.Once
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			r.conns = append(r.conns, c)
			r.mu.Unlock()
			once.Do(func() { close(r.accepted) })
		}
	}()
	t.Cleanup(r.letGo)
	return r
}

// letGo closes the listener and the connections: the dial fails, Redis is
// down.
func (r *silentRedis) letGo() {
	r.ln.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		c.Close()
	}
	r.conns = nil
}

// startDialling starts `sluice serve` on a Redis that does not answer
// (on_error: local, timeout 1m, the largest: the startup waits on the
// dial until letGo or a signal), and returns once it is dialling.
func startDialling(t *testing.T) (*sigProc, *silentRedis) {
	r := startSilentRedis(t)
	cfg := fmt.Sprintf("listen: 127.0.0.1:0\nstore: {type: redis, on_error: local, expected_instances: 2, redis: {addrs: [%q], timeout: 1m}}\nrules:\n  - name: r\n    rate: 10/m\n", r.ln.Addr().String())
	p := startSigProc(t, writeConfig(t, cfg))
	select {
	case <-r.accepted:
	case <-p.exited:
		t.Fatalf("sluice serve exited before it dialled Redis; output:\n%s", p.logs())
	}
	return p, r
}

// TestServeSignalDuringStartup: SIGINT or SIGTERM while the startup still
// dials Redis (under on_error: local a Redis that does not answer does
// not stop the start) ends the startup at once, the dial abandoned:
// nothing is served (no address told), exit 0. Redis stays silent until
// the process has exited, and store.redis.timeout is a minute (its
// largest), twice the hang guard of wantExit: an exit that waited for
// the dial to give up fails the test.
func TestServeSignalDuringStartup(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			p, _ := startDialling(t)
			p.signal(sig)
			p.waitLog("stopping gracefully") // received while the dial still hangs
			p.waitLog("stopped during startup: nothing served")
			p.wantExit(sig.String()+" during startup, Redis silent", 0)
			out := p.logs()
			if strings.Contains(out, "decision API on") {
				t.Errorf("sluice serve told an address after %s during its startup:\n%s", sig, out)
			}
			if strings.Contains(out, "sluice serve:") {
				t.Errorf("sluice serve reported an error after %s during its startup:\n%s", sig, out)
			}
		})
	}
}

// TestServeSIGHUPDuringStartup: a SIGHUP while the startup still dials
// Redis does not kill the process (a SIGHUP's default action): it reloads
// the config once the daemon runs; SIGTERM then stops it, exit 0.
func TestServeSIGHUPDuringStartup(t *testing.T) {
	p, r := startDialling(t)
	p.signal(syscall.SIGHUP)
	r.letGo()
	p.waitLog("config reloaded")
	p.signal(syscall.SIGTERM)
	p.wantExit("SIGHUP during startup, then SIGTERM", 0)
}
