//go:build race

package server_test

// raceEnabled: the race detector allocates on paths that allocate nothing
// without it, so allocation counts are checked only without it.
const raceEnabled = true
