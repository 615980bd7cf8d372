package ctxtime

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func TestSleepElapses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if err := Sleep(context.Background(), 3*time.Second); err != nil {
			t.Fatalf("Sleep: %v, want nil", err)
		}
		if got := time.Since(start); got != 3*time.Second {
			t.Fatalf("slept %v, want 3s", got)
		}
	})
}

func TestSleepEndsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		if err := Sleep(ctx, time.Hour); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Sleep: %v, want DeadlineExceeded", err)
		}
		if got := time.Since(start); got != time.Second {
			t.Fatalf("returned after %v, want 1s (the context's deadline)", got)
		}
	})
}

func TestSleepNonPositive(t *testing.T) {
	if err := Sleep(context.Background(), 0); err != nil {
		t.Fatalf("Sleep(0): %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, -time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep(-1s) on a cancelled context: %v, want Canceled", err)
	}
}
