package bench

import (
	"syscall"
	"testing"
	"time"
)

// report adds the share of admitted requests, so a reader sees each row
// measured what it claims (admit or deny path).
func report(b *testing.B, admitted, n int64) {
	if n > 0 {
		b.ReportMetric(float64(admitted)/float64(n), "admit/op")
	}
}

// cpuTime is the CPU time this process has used. On a shared machine the
// wall time of a benchmark includes the time other processes held the CPU;
// cpu-ns/op (CPU time ÷ operations, all goroutines included) does not, so
// it is the steadier figure when the machine is busy.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, since time.Duration, n int64) {
	if n > 0 {
		b.ReportMetric(float64(cpuTime()-since)/float64(n), "cpu-ns/op")
	}
}
