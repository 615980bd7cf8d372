package proxy

import (
	"io"
	"time"
)

type tunnel struct{ io.ReadWriteCloser }

func newTunnel(rwc io.ReadWriteCloser, idle time.Duration) *tunnel { return &tunnel{rwc} }
