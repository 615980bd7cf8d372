package server_test

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
)

// openWith starts a rate limit call (open), its HEADERS with extra
// fields too.
func (r *reqClient) openWith(extra ...[2]string) (uint32, error) {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range append(callFields[:len(callFields):len(callFields)], extra...) {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	r.mu.Lock()
	id := r.next
	r.next += 2
	r.windows[id] = r.initial
	r.mu.Unlock()
	r.wmu.Lock()
	defer r.wmu.Unlock()
	return id, r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true})
}

// TestGRPCRequestBytesNoDrift: requests ending every way a request can
// end, many of each, on one listener (its bound lowered to 1 MiB, so that
// the bound closes connections too), leave it holding nothing once they
// have ended: a count that drifted up would fill the budget by itself
// and, in time, close honest connections. The endings: whole; reset by
// the client; its connection closed, or sent GOAWAY and closed; ended by
// the server while still coming (its deadline passed; a message longer
// than the listener takes; trailers ending it short); a connection closed
// for the bound.
func TestGRPCRequestBytesNoDrift(t *testing.T) {
	const bound = 1 << 20
	env := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf),
		envOpts{grpc: server.GRPCOptions{KeepaliveTime: time.Hour, MaxRequestBytes: bound}})
	body := requestOf(t, 100<<10)
	part := body[:60<<10]
	// A gRPC message prefix announcing more than MaxRecvMsgSize.
	huge := binary.BigEndian.AppendUint32([]byte{0}, server.MaxRecvMsgSize+1)
	huge = append(huge, make([]byte, 20<<10)...)

	// ended waits for call id of r to end, and returns how ("" if the
	// connection ended first).
	ended := func(r *reqClient, id uint32) string {
		r.wait(func() bool { return r.ended[id] != "" })
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.ended[id]
	}
	const rounds = 12
	for round := range rounds {
		r := dialRequests(t, env)
		for k := range 4 {
			// Whole, in two pieces.
			id, err := r.open()
			if err == nil {
				err = r.send(id, part, false)
			}
			if err == nil {
				err = r.send(id, body[len(part):], true)
			}
			if err != nil {
				t.Fatalf("round %d: a whole request: %v", round, err)
			}
			if got := ended(r, id); got != "grpc-status 0" {
				t.Fatalf("round %d: a whole request ended %q, want grpc-status 0", round, got)
			}
			// Reset by the client, after part of it; or before any DATA.
			if id, err = r.open(); err == nil && k%2 == 0 {
				err = r.send(id, part, false)
			}
			if err == nil {
				err = r.reset(id)
			}
			if err != nil {
				t.Fatalf("round %d: a request reset: %v", round, err)
			}
			// Its deadline passed while it came: the server ends it.
			if id, err = r.openWith([2]string{"grpc-timeout", "1n"}); err == nil {
				err = r.send(id, part[:1<<10], false)
			}
			if err != nil && ended(r, id) == "" {
				t.Fatalf("round %d: a request past its deadline: %v", round, err)
			}
			ended(r, id)
			// A message longer than the listener takes.
			if id, err = r.open(); err == nil {
				r.send(id, huge, false) // may end early: the server answers at the prefix
			}
			if got := ended(r, id); got == "" {
				t.Fatalf("round %d: a request too long: the connection ended", round)
			}
			// Trailers end it short: an empty END_STREAM after part of it.
			if id, err = r.open(); err == nil {
				err = r.send(id, part, false)
			}
			if err == nil {
				err = r.send(id, nil, true)
			}
			if err != nil {
				t.Fatalf("round %d: a request ended short: %v", round, err)
			}
			if got := ended(r, id); got == "" || got == "grpc-status 0" {
				t.Fatalf("round %d: a request ended short: %q, want an error status", round, got)
			}
		}
		// All ended on a connection still open (as Envoy's stays): none
		// held.
		waitRequestBytes(t, env, 0)
		// Requests left coming, then the connection ends: closed; or a
		// GOAWAY, then closed.
		for range 3 {
			id, err := r.open()
			if err == nil {
				err = r.send(id, part, false)
			}
			if err != nil {
				t.Fatalf("round %d: a request left coming: %v", round, err)
			}
		}
		if round%2 == 1 {
			r.wmu.Lock()
			r.fr.WriteGoAway(0, http2.ErrCodeNo, nil)
			r.wmu.Unlock()
		}
		r.c.Close()
		// Connections past the bound: the oldest are closed for it.
		closed := env.grpc.ClosedRequestBytes()
		var cs []*reqClient
		for range bound/len(part) + 2 {
			c := dialRequests(t, env)
			if id, err := c.open(); err == nil {
				c.send(id, part, false) // the connection may be closed for the bound
			}
			cs = append(cs, c)
		}
		for guard := time.Now().Add(time.Minute); env.grpc.ClosedRequestBytes() == closed; time.Sleep(time.Millisecond) {
			if time.Now().After(guard) { // a hang guard, not a measure
				t.Fatalf("round %d: no connection closed for the bound", round)
			}
		}
		for _, c := range cs {
			c.c.Close()
		}
		waitRequestBytes(t, env, 0)
	}
	if got := env.grpc.ClosedRequestBytes(); got == 0 {
		t.Errorf("ClosedRequestBytes() = 0, want the connections past the bound closed")
	}
	t.Logf("%d rounds: none held after; %d connections closed for the bound", rounds, env.grpc.ClosedRequestBytes())
	// The listener serves on.
	env.call(t, "web", 0, desc("user", "after"))
}
