package main

import (
	"context"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// The heap floor
//
// With the counters in Redis the daemon's live heap is a few MB while every
// decision leaves garbage (gRPC's frames, contexts, the messages), so at
// GOGC=100 the collector runs each few MB allocated: 20+ cycles a second
// under load, each one costing CPU and shrinking the stacks of the idle
// gRPC stream workers, which the next calls grow again. Unless GOGC is set
// in the environment, serve lets the heap grow to heapFloor before
// collecting: the GC percentage is max(100, heapFloor/live − 1), recomputed
// every second from the live heap. A heap already larger than the floor
// (the memory store's counters) keeps GOGC=100.

// heapFloor is the smallest heap goal serve keeps.
const heapFloor = 32 << 20

// gcPercent returns the GC percentage that puts the heap goal, live ×
// (1 + p/100), at floor, or 100 when that is less.
func gcPercent(live, floor uint64) int {
	if live == 0 || live*2 >= floor {
		return 100
	}
	return int(min((floor-live)*100/live, 100_000))
}

// keepHeapFloor applies gcPercent every interval until ctx ends; it does
// nothing when GOGC is set.
func keepHeapFloor(ctx context.Context, every time.Duration) {
	if _, set := os.LookupEnv("GOGC"); set {
		return
	}
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	cur := 100
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		metrics.Read(sample)
		if sample[0].Value.Kind() == metrics.KindUint64 {
			// Change it only when it moves by a fifth or more.
			if p := gcPercent(sample[0].Value.Uint64(), heapFloor); p*5 < cur*4 || p*4 > cur*5 {
				debug.SetGCPercent(p)
				cur = p
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
