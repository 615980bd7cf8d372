//go:build race

package fleet

// raceEnabled: the race detector's own allocations and slowness make heap
// measurements over millions of decisions meaningless under it.
const raceEnabled = true
