package deferq

import (
	"context"
	"testing"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/redistest"
)

// owner returns the consumer entry sid is pending with ("" if none).
func owner(t *testing.T, c rueidis.Client, w *worker, sid string) string {
	t.Helper()
	p, err := c.Do(context.Background(), c.B().Xpending().Key(w.base+"q").Group(group).Start(sid).End(sid).Count(1).Build()).ToArray()
	if err != nil || len(p) != 1 {
		return ""
	}
	r, _ := p[0].ToArray()
	s, _ := r[1].ToString()
	return s
}

// A turn claiming its key's older request (claimHead) whose reply is lost
// after Redis ran the claim: the request was claimed for this instance
// (and, with no room for both, the waiting one let go), and the instance
// forgot it, held by nobody until ClaimIdle, its key's later requests
// waiting behind it (their turns see it pending with this live instance:
// "wait"). It is asked again under the same token, and read.lua returns
// what the lost reply held.
func TestClaimHeadReplyLost(t *testing.T) {
	for _, swap := range []bool{false, true} {
		name := "room"
		room := int64(1 << 30)
		if swap {
			name, room = "swap", 500<<10
		}
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			w, c, es, sids := headsAt(t, srv, room, 1, 300<<10, 300<<10)
			ctx := context.Background()
			// Loaded, so that the EVALSHA whose reply is lost runs.
			if err := c.Do(ctx, c.B().ScriptLoad().Script(readLua).Build()).Error(); err != nil {
				t.Fatal(err)
			}
			x := redistest.NewCutter(t, srv.Addr, sids[0], false)
			cc := x.Client(t)
			w.q.o.Connect = func() rueidis.Client { return cc }
			x.Arm()
			done := make(chan result, 1)
			go func() { done <- w.claimHead(ctx, es[0], sids[0]) }()
			select {
			case got := <-w.in:
				if len(got) != 1 || got[0].sid != sids[0] {
					t.Errorf("claimHead handed over %d entries, want the key's first, %s", len(got), sids[0])
				}
			case r := <-done:
				t.Fatalf("claimHead = %+v, the reply lost (cut: %v), nothing handed over: %s pending with %q, held by nobody until ClaimIdle",
					r, x.Cut(), sids[0], owner(t, c, w, sids[0]))
			}
			r := <-done
			if !x.Cut() {
				t.Fatal("no reply was lost")
			}
			if r.drop != swap {
				t.Errorf("claimHead = %+v, want drop %v (the waiting request let go: %v)", r, swap, swap)
			}
			if o := owner(t, c, w, sids[0]); o != w.consumer {
				t.Errorf("%s pending with %q, want %q", sids[0], o, w.consumer)
			}
			if held, bytes := w.held.Load(), w.heldBytes.Load(); bytes > room {
				t.Errorf("%d held, %d KiB, over the bound (%d KiB)", held, bytes>>10, room>>10)
			}
		})
	}
}

// The reader's reads, new entries and claim rounds, whose reply is lost
// after Redis ran them: what they read stayed pending with this
// instance, held by nobody until ClaimIdle. Asked again under the same
// token, read.lua returns it, and reads nothing more.
func TestReadReplyLost(t *testing.T) {
	for _, mode := range []string{"new", "claim"} {
		t.Run(mode, func(t *testing.T) {
			srv := redistest.StartServer(t)
			// heads: one request pending with "a", silent for an hour
			// (claimable), one with "s"; this reader is "t". For a new
			// read, the group's last id goes back to 0, so that both
			// are new again.
			w, c, _, sids := headsAt(t, srv, 1<<30, 1, 1, 1)
			ctx := context.Background()
			stream := w.base + "q"
			w.consumer = "t"
			if mode == "new" {
				if err := c.Do(ctx, c.B().XgroupSetid().Key(stream).Group(group).Id("0").Build()).Error(); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Do(ctx, c.B().ScriptLoad().Script(readLua).Build()).Error(); err != nil {
				t.Fatal(err)
			}
			x := redistest.NewCutter(t, srv.Addr, "\r\n"+mode+"\r\n", false)
			cc := x.Client(t)
			x.Arm()
			idle := "3600000"
			if mode == "claim" {
				idle = "1000" // "a" silent for an hour
			}
			_, es, err := w.readEntries(ctx, cc, []string{group, "t", mode, "100", "1048576", idle, "0-0"}, nil)
			if !x.Cut() {
				t.Fatal("no reply was lost")
			}
			if err != nil || len(es) == 0 {
				p, _ := c.Do(ctx, c.B().Xpending().Key(stream).Group(group).Start("-").End("+").Count(10).Consumer("t").Build()).ToArray()
				t.Fatalf("%s read, its reply lost: %d entries, %v; %d pending with it, held by nobody until ClaimIdle", mode, len(es), err, len(p))
			}
			if mode == "claim" && (len(es) != 1 || es[0].ID != sids[0]) {
				t.Errorf("claim round: %d entries, want %s", len(es), sids[0])
			}
			if mode == "new" && len(es) != 2 {
				t.Errorf("new read: %d entries, want the 2 queued", len(es))
			}
		})
	}
}

// The record of a read (its entries, for a read asked again) lasts until
// the reader's next read, whose reply tells that the last one's came: it
// is not left for ClaimIdle, one key per read of the reader.
func TestReadRecordForgotten(t *testing.T) {
	w, c, _, _ := heads(t, 1<<30, 1, 1, 1)
	ctx := context.Background()
	var record string
	_, es, err := w.readEntries(ctx, c, []string{group, "t", "claim", "100", "1048576", "1000", "0-0"}, &record)
	if err != nil || len(es) != 1 || record == "" {
		t.Fatalf("claim round: %d entries, %v, record %q; want the silent one's, recorded", len(es), err, record)
	}
	if n, err := c.Do(ctx, c.B().Exists().Key(record).Build()).AsInt64(); err != nil || n != 1 {
		t.Fatalf("EXISTS %s = %d, %v; want the read recorded", record, n, err)
	}
	first := record
	if _, es, err = w.readEntries(ctx, c, []string{group, "t", "new", "100", "1048576", "1000", ""}, &record); err != nil || len(es) != 0 {
		t.Fatalf("new read: %d entries, %v; want none", len(es), err)
	}
	if n, err := c.Do(ctx, c.B().Exists().Key(first).Build()).AsInt64(); err != nil || n != 0 {
		t.Errorf("EXISTS %s = %d, %v after the next read; want it deleted", first, n, err)
	}
	if record != "" {
		t.Errorf("record %q after a read that returned nothing, want none", record)
	}
}
