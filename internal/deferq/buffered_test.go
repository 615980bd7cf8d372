package deferq_test

import (
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The bodies read for deferral at once are bounded over the daemon, not
// only each by its rule's cap: every over-limit request of a defer rule is
// read whole into memory before it is queued, and with 10,000 connections
// and 64 MiB bodies that was up to 640 GB. Past MaxBufferedBytes a request
// is refused (ErrBusy: the proxy answers 429, as without defer) without
// its body being read; a body of unknown length counts at its rule's cap
// while it is read, its length once read, nothing once released.
func TestBufferedBodiesBounded(t *testing.T) {
	srv := redistest.StartServer(t)
	q, err := newQueue(deferq.Options{Client: client(t, srv.Addr), MaxBufferedBytes: 10})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs", MaxBodyBytes: 8}})
	rule := q.Rule("jobs")

	// A chunked upload (no length) being read: 8 bytes counted.
	pr, pw := io.Pipe()
	slow := httptest.NewRequest("POST", "/x", pr)
	slow.ContentLength = -1
	type read struct {
		body    []byte
		release func()
		err     error
	}
	done := make(chan read, 1)
	go func() {
		b, rel, err := q.ReadBody(slow, rule)
		done <- read{b, rel, err}
	}()
	if _, err := pw.Write([]byte("ab")); err != nil { // returns once ReadBody reads
		t.Fatal(err)
	}
	small := func(body string) (func(), error) {
		_, rel, err := q.ReadBody(httptest.NewRequest("POST", "/x", strings.NewReader(body)), rule)
		return rel, err
	}
	if _, err := small("12345"); !errors.Is(err, deferq.ErrBusy) {
		t.Fatalf("5 bytes while an upload of unknown length (cap 8) is read, bound 10: %v, want ErrBusy", err)
	}
	if rel, err := small("12"); err != nil {
		t.Fatalf("2 bytes while an upload of unknown length (cap 8) is read, bound 10: %v, want it read", err)
	} else {
		rel()
	}
	pw.Close()
	r := <-done
	if r.err != nil || string(r.body) != "ab" {
		t.Fatalf("the upload: %q, %v", r.body, r.err)
	}
	// Read: its 2 bytes count, not the cap.
	rel, err := small("12345678")
	if err != nil {
		t.Fatalf("8 bytes with 2 held, bound 10: %v, want it read", err)
	}
	if _, err := small("1"); !errors.Is(err, deferq.ErrBusy) {
		t.Fatalf("1 byte with 10 held, bound 10: %v, want ErrBusy", err)
	}
	rel()
	r.release()
	r.release() // twice is harmless
	if rel, err := small("12345678"); err != nil {
		t.Fatalf("8 bytes with nothing held: %v", err)
	} else {
		rel()
	}
}
