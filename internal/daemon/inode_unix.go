//go:build unix

package daemon

import (
	"os"
	"syscall"
)

// inode is fi's inode number, 0 where the system has none to tell.
func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}
