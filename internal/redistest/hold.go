package redistest

import (
	"context"
	"net"
	"strconv"
	"syscall"
)

// A stopped server's ports are held until it restarts (or the test ends):
// a socket bound to each, not listening, with SO_REUSEADDR as
// redis-server binds its own. A connection to a held port is refused, as
// by a stopped server. The kernel gives a held port to no outgoing
// connection and to no bind to port 0; freePort, in this process or
// another test's, probes without SO_REUSEADDR and so finds it taken. The
// restarted redis-server binds and listens beside the hold (Linux lets
// sockets with SO_REUSEADDR share a port while none listens), and the hold
// is let go once it is ready: the port is never free in between. Only a
// process that binds that very port with SO_REUSEADDR can take it
// meanwhile; Restart then fails and says so.

// ports are the server's ports: its own, a cluster node's bus port, a TLS
// port.
func (s *Server) ports() []int {
	ps := []int{s.port}
	if s.cluster {
		ps = append(ps, s.port+10000)
	}
	if s.tlsPort != 0 {
		ps = append(ps, s.tlsPort)
	}
	return ps
}

// hold binds the stopped server's ports, once. A port it cannot bind
// (taken the instant redis-server let it go) is logged: Restart reports
// it if it stays taken.
func (s *Server) hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held != nil || s.cmd != nil {
		return
	}
	s.held = []int{}
	for _, p := range s.ports() {
		fd, err := holdPort(p)
		if err != nil {
			s.tb.Logf("redistest: cannot hold port %d of the stopped server %s: %v", p, s.Addr, err)
			continue
		}
		s.held = append(s.held, fd)
	}
}

// release lets the held ports go.
func (s *Server) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, fd := range s.held {
		syscall.Close(fd)
	}
	s.held = nil
}

// holdPort returns a socket bound to 127.0.0.1:port, not listening, with
// SO_REUSEADDR; close-on-exec, so that no redis-server inherits it.
func holdPort(port int) (int, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		syscall.Close(fd)
		return -1, err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		return -1, err
	}
	return fd, nil
}

// probePort returns an error if port is not free on 127.0.0.1 now, held
// included: it listens without SO_REUSEADDR, which a held port (or one
// with connections in TIME_WAIT) refuses.
func probePort(port int) error {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) {
			err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 0)
		}); cerr != nil {
			return cerr
		}
		return err
	}}
	ln, err := lc.Listen(context.Background(), "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return ln.Close()
}
