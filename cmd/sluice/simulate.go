package main

import (
	"context"
	"fmt"
	"io"
)

// simulate is replaced by the trace replayer (internal/sim).
func simulate(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "sluice simulate: not yet available")
	return 1
}
