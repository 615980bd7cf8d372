package deferq

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/redistest"
)

// A held request let go alone (claimHead with no room for its key's older
// request even in its own place: release.lua, one entry) whose reply is
// lost after Redis let it go (the connection cut once the script ran):
// the turn kept it held (drop false, another turn in 250 ms) while Redis
// had let it go, idle for ClaimIdle, free for any instance's claim round,
// so this instance counted against its bound, and turned, a request it
// no longer kept. It is asked again, and the turn lets it go.
func TestLoneLetGoReplyLost(t *testing.T) {
	srv := redistest.StartServer(t)
	// Two keys, each with its head held by a silent consumer and its
	// second request held here; room for the two held here only, so that
	// neither head fits even in the place of the request waiting for it.
	w, c, es, sids := headsAt(t, srv, 1, 2, 300<<10, 300<<10)
	w.q.o.MaxHeldBytes = w.heldBytes.Load()
	e := es[0]
	ctx := context.Background()
	// Loaded, so that the EVALSHA whose reply is lost runs.
	if err := c.Do(ctx, c.B().ScriptLoad().Script(releaseLua).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	x := redistest.NewCutter(t, srv.Addr, e.sid, false)
	cc := x.Client(t)
	w.q.o.Connect = func() rueidis.Client { return cc }
	x.Arm()
	r := w.claimHead(ctx, e, sids[0])
	if !x.Cut() {
		t.Fatal("no reply was lost")
	}
	p, err := c.Do(ctx, c.B().Xpending().Key(w.base+"q").Group(group).Start(e.sid).End(e.sid).Count(1).Build()).ToArray()
	if err != nil || len(p) != 1 {
		t.Fatalf("XPENDING %s: %d entries, %v; want it pending (let go, not settled)", e.sid, len(p), err)
	}
	f, _ := p[0].ToArray()
	ms, _ := f[2].AsInt64()
	letGo := time.Duration(ms)*time.Millisecond >= w.q.o.ClaimIdle
	if !letGo || !r.drop {
		t.Errorf("lone let-go, its reply lost: claimHead = %+v (drop %v), %s idle %v in Redis (let go: %v); want both let go",
			r, r.drop, e.sid, time.Duration(ms)*time.Millisecond, letGo)
	}
	if o := owner(t, c, w, sids[0]); o != "a" {
		t.Errorf("the key's head %s pending with %q, want still with the silent %q (no room to claim it)", sids[0], o, "a")
	}
}
