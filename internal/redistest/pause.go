package redistest

import "syscall"

// Pause freezes the server with SIGSTOP, as a hung host or a paused VM:
// its ports still accept connections (the kernel completes them), but
// nothing is read or answered, and its open connections stay up, silent,
// until Resume. Stop, Kill and the test's end resume it first.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume lets a paused server run again (SIGCONT).
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.tb.Helper()
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		s.tb.Fatalf("redistest: signal %v to %s: not running", sig, s.Addr)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		s.tb.Fatalf("redistest: signal %v to %s: %v", sig, s.Addr, err)
	}
}
