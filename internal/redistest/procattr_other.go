//go:build !linux

package redistest

import "syscall"

// procAttr: other systems have no parent-death signal; a test binary
// that dies without its cleanups may leave its servers running there.
func procAttr() *syscall.SysProcAttr { return nil }
