package bench

import "testing"

// report adds the share of admitted requests, so a reader sees each row
// measured what it claims (admit or deny path).
func report(b *testing.B, admitted, n int64) {
	if n > 0 {
		b.ReportMetric(float64(admitted)/float64(n), "admit/op")
	}
}
