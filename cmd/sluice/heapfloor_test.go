package main

import "testing"

func TestGCPercent(t *testing.T) {
	for _, tc := range []struct {
		live, floor uint64
		want        int
	}{
		{0, 32 << 20, 100},         // no GC yet: the default
		{4 << 20, 32 << 20, 700},   // goal 4 MB × 8 = 32 MB
		{1 << 20, 32 << 20, 3100},  // goal 32 MB
		{16 << 20, 32 << 20, 100},  // at half the floor: the default already reaches it
		{200 << 20, 32 << 20, 100}, // a large heap (memory store): the default
		{1, 32 << 20, 100_000},     // capped
	} {
		if got := gcPercent(tc.live, tc.floor); got != tc.want {
			t.Errorf("gcPercent(%d, %d) = %d, want %d", tc.live, tc.floor, got, tc.want)
		}
	}
}
