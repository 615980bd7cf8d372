//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package daemon

import "os"

// lockBindDir and removeLeftovers need flock(2) and kill(2): without them
// a directory left by a killed daemon is never taken for a dead one's,
// and stays.
func lockBindDir(*os.File)   {}
func removeLeftovers(string) {}
