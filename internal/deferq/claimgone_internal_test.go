package deferq

import (
	"context"
	"slices"
	"testing"
)

// A held request waiting for its key's older one, which a silent instance
// held and which was trimmed from the stream since, claims that one
// (claimHead): the claim drops it from the group (XCLAIM drops deleted
// entries), and the same script cleans what it left, found by the
// stream-id index: its record and its place in the key's list. The
// record used to read "queued" until someone asked.
func TestClaimHeadOfTrimmedForgets(t *testing.T) {
	w, c, es, sids := heads(t, 64<<20, 1, 10, 10)
	ctx := context.Background()
	head, err := c.Do(ctx, c.B().Hget().Key(w.base+"i").Field(sids[0]).Build()).ToString()
	if err != nil {
		t.Fatalf("the head's index entry: %v", err)
	}
	if err := c.Do(ctx, c.B().Xtrim().Key(w.base+"q").Minid().Threshold(es[0].sid).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if r := w.claimHead(ctx, es[0], sids[0]); r.drop {
		t.Fatalf("claimHead of a head trimmed away: %+v; want to wait, held", r)
	}
	if n, err := c.Do(ctx, c.B().Exists().Key(w.base+"s:"+head).Build()).AsInt64(); err != nil || n != 0 {
		t.Errorf("the head's record after a claim met its request trimmed away: EXISTS %d, %v; want 0", n, err)
	}
	if ok, err := c.Do(ctx, c.B().Hexists().Key(w.base+"i").Field(sids[0]).Build()).AsBool(); err != nil || ok {
		t.Errorf("the head's index entry after the claim: %v, %v; want gone", ok, err)
	}
	l, err := c.Do(ctx, c.B().Lrange().Key(w.base+"k:"+keyDigest(es[0].key)).Start(0).Stop(-1).Build()).AsStrSlice()
	if err != nil || !slices.Equal(l, []string{es[0].id}) {
		t.Errorf("the key's list after the claim: %v, %v; want [%s], the held request alone", l, err, es[0].id)
	}
}

// A read asked again under its token (its reply was lost) claims again
// what it read; an entry of it trimmed from the stream meanwhile is
// dropped from the group by that claim (XCLAIM drops deleted entries),
// and the same script cleans its record and its place in its key's list,
// found by the stream-id index.
func TestReadAgainOfTrimmedForgets(t *testing.T) {
	w, c, es, sids := heads(t, 64<<20, 1, 10, 10)
	ctx := context.Background()
	head, err := c.Do(ctx, c.B().Hget().Key(w.base+"i").Field(sids[0]).Build()).ToString()
	if err != nil {
		t.Fatalf("the head's index entry: %v", err)
	}
	keys := []string{w.base + "q", w.base + "i", w.base + "r:token"}
	args := []string{group, "t", "claim", "100", "1048576", "1000", "0-0"}
	got, err := readScript.Exec(ctx, c, keys, args).ToArray()
	if err != nil || len(got) != 2 {
		t.Fatalf("claim round: %v, %v", got, err)
	}
	if read, _ := got[1].AsXRange(); len(read) != 1 || read[0].ID != sids[0] {
		t.Fatalf("claim round read %v, want the silent instance's %s", read, sids[0])
	}
	if err := c.Do(ctx, c.B().Xtrim().Key(w.base+"q").Minid().Threshold(es[0].sid).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	got, err = readScript.Exec(ctx, c, keys, args).ToArray() // its reply lost: asked again
	if err != nil || len(got) != 2 {
		t.Fatalf("claim round asked again: %v, %v", got, err)
	}
	if read, _ := got[1].AsXRange(); len(read) != 0 {
		t.Errorf("claim round asked again read %v, want nothing (its one entry trimmed away)", read)
	}
	if n, err := c.Do(ctx, c.B().Exists().Key(w.base+"s:"+head).Build()).AsInt64(); err != nil || n != 0 {
		t.Errorf("the trimmed request's record after the read asked again: EXISTS %d, %v; want 0", n, err)
	}
	l, err := c.Do(ctx, c.B().Lrange().Key(w.base+"k:"+keyDigest(es[0].key)).Start(0).Stop(-1).Build()).AsStrSlice()
	if err != nil || !slices.Equal(l, []string{es[0].id}) {
		t.Errorf("the key's list after the read asked again: %v, %v; want [%s]", l, err, es[0].id)
	}
}
