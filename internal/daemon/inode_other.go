//go:build !unix

package daemon

import "os"

// inode is 0: this system's file info has no inode number (the watcher's
// signature then tells a replaced file by its size and time alone).
func inode(os.FileInfo) uint64 { return 0 }
