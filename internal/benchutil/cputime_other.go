//go:build !unix

package benchutil

import "time"

// CPUTime is 0: this system has no getrusage (cpu-ns/op then reads 0).
func CPUTime() time.Duration { return 0 }
