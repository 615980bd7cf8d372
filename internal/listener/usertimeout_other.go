//go:build !linux

package listener

import (
	"net"
	"time"
)

// setUserTimeout does nothing off Linux (no TCP_USER_TIMEOUT), as
// grpc-go's own does not.
func setUserTimeout(net.Conn, time.Duration) error { return nil }
