package main

import (
	"fmt"
	"io"
)

// checkConfig is replaced by the config loader (internal/daemon).
func checkConfig(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "sluice check-config: not yet available")
	return 1
}
