package sluice

import (
	"math"
	"testing"
	"time"
)

// TestParamsFastPath: paramsTo's one-branch common case gives exactly
// what the full checks (paramsSlow) give, params and error alike, on a grid
// of limits around every boundary the checks draw.
func TestParamsFastPath(t *testing.T) {
	rates := []int64{math.MinInt64, -1, 0, 1, 2, 999, 1000, 1 << 20, 1<<53 - 1, 1 << 53, math.MaxInt64}
	periods := []time.Duration{-time.Second, 0, 1, 999, time.Microsecond, 1500, time.Millisecond, time.Second, time.Hour, 24 * time.Hour, math.MaxInt64}
	segments := []int{-1, 0, 1, 2, 1024, 1025}
	n := 0
	for _, r := range rates {
		for _, b := range rates {
			for _, per := range periods {
				for _, sg := range segments {
					l := Limit{Rate: r, Burst: b, Period: per, Segments: sg}
					var fast, slow params
					ef, es := l.paramsTo(&fast), l.paramsSlow(&slow)
					if (ef == nil) != (es == nil) || (ef != nil && ef.Error() != es.Error()) {
						t.Fatalf("%+v: paramsTo error %v, paramsSlow %v", l, ef, es)
					}
					if ef == nil && fast != slow {
						t.Fatalf("%+v: paramsTo %+v, paramsSlow %+v", l, fast, slow)
					}
					if ef == nil {
						n++
					}
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no valid limit in the grid")
	}
}
