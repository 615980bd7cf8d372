package main

import (
	"context"
	"fmt"
	"io"
)

// serve is replaced by the daemon (internal/daemon).
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "sluice serve: not yet available")
	return 1
}
