//go:build !linux

package rawio

const supported = false

func (c *Conn) read(fd uintptr) bool     { panic("rawio: unsupported") }
func (c *Conn) write(fd uintptr) bool    { panic("rawio: unsupported") }
func (c *Conn) writeNow(fd uintptr) bool { panic("rawio: unsupported") }

func (c *Conn) writeSome(fd uintptr) bool { panic("rawio: unsupported") }

func (c *Conn) peekFd(fd uintptr) { panic("rawio: unsupported") }
