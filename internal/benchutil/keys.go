package benchutil

import (
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// NumKeys is how many keys the million-key benchmarks use.
const NumKeys = 1_000_000

var (
	keysOnce sync.Once
	keys1M   []string
)

// Keys returns NumKeys distinct 12-byte keys, "user:0000000" …, made once
// per process and shared: the caller must not change the slice.
func Keys() []string {
	keysOnce.Do(func() {
		keys1M = make([]string, NumKeys)
		for i := range keys1M {
			keys1M[i] = Key(i)
		}
	})
	return keys1M
}

// Key is the i-th key of Keys, made anew: "user:" and i, zero-padded to
// seven digits.
func Key(i int) string {
	var b [16]byte
	buf := append(b[:0], "user:"...)
	s := strconv.AppendInt(nil, int64(i), 10)
	for range 7 - len(s) {
		buf = append(buf, '0')
	}
	return string(append(buf, s...))
}

// ReportCPUSince reports the process's CPU time since since (a CPUTime
// reading) per operation of n, as cpu-ns/op; nothing if n is not
// positive. On a shared machine the wall time of a benchmark includes the
// time other processes held the CPU; cpu-ns/op (CPU time ÷ operations,
// all goroutines included) does not, so it is the steadier figure when
// the machine is busy.
func ReportCPUSince(b *testing.B, since time.Duration, n int64) {
	if n > 0 {
		b.ReportMetric(float64(CPUTime()-since)/float64(n), "cpu-ns/op")
	}
}

// HeapAlloc is the live heap after two full collections.
func HeapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
