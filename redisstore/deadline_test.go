package redisstore

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func TestDeadlinesBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDeadlines(50 * time.Millisecond)
		start := time.Now()
		a := d.bound(context.Background())
		dl, ok := a.Deadline()
		if !ok || dl.Before(start.Add(50*time.Millisecond-d.width)) || dl.After(start.Add(50*time.Millisecond)) {
			t.Fatalf("deadline %v after start, want within %v of 50ms", dl.Sub(start), d.width)
		}
		time.Sleep(d.width / 2)
		b := d.bound(context.Background())
		if a.Done() != b.Done() {
			t.Error("two calls within the width got different buckets")
		}
		time.Sleep(d.width)
		c := d.bound(context.Background())
		if c.Done() == a.Done() {
			t.Error("a call past the width shares the old bucket: its bound would be short by more than the width")
		}
		if a.Err() != nil {
			t.Fatalf("Err before the deadline: %v", a.Err())
		}
		<-a.Done()
		if got := time.Since(start); got > 50*time.Millisecond || got < 50*time.Millisecond-d.width {
			t.Errorf("done after %v, want within %v of 50ms", got, d.width)
		}
		if !errors.Is(a.Err(), context.DeadlineExceeded) {
			t.Errorf("Err = %v, want DeadlineExceeded", a.Err())
		}
		// A caller's sooner deadline is kept as it is.
		own, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if d.bound(own) != own {
			t.Error("a caller's 20ms deadline was replaced by the 50ms bound")
		}
		// A caller cancelled before the call reports its own error; values pass.
		type key struct{}
		parent, stop := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
		e := d.bound(parent)
		stop()
		if !errors.Is(e.Err(), context.Canceled) || e.Value(key{}) != "v" {
			t.Errorf("cancelled caller: Err %v, value %v; want Canceled and v", e.Err(), e.Value(key{}))
		}
		<-c.Done()
	})
}
