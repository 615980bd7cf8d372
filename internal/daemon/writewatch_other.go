//go:build !linux

package daemon

import "time"

// writeWatch needs inotify's IN_CLOSE_WRITE: elsewhere there is none, and
// a reload goes by the directory events alone.
type writeWatch struct{}

func newWriteWatch(...string) *writeWatch                                  { return nil }
func (*writeWatch) follow()                                                {}
func (*writeWatch) writing(time.Time, time.Duration) (bool, time.Duration) { return false, 0 }
func (*writeWatch) run(func(bool))                                         {}
func (*writeWatch) close()                                                 {}
