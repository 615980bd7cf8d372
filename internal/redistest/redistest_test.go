package redistest

import (
	"strings"
	"syscall"
	"testing"
)

func TestServerStopRestart(t *testing.T) {
	s := StartServer(t)
	if got, err := Do(s.Addr, "PING"); err != nil || got != "PONG" {
		t.Fatalf("PING %s = %q, %v; want PONG", s.Addr, got, err)
	}
	if _, err := Do(s.Addr, "SET", "k", "v"); err != nil {
		t.Fatalf("SET: %v", err)
	}
	pid := s.PID()
	s.Stop()
	if _, err := Do(s.Addr, "PING"); err == nil {
		t.Fatalf("PING after Stop succeeded; want an error")
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatalf("process %d still exists after Stop", pid)
	}
	s.Restart()
	if got, err := Do(s.Addr, "PING"); err != nil || got != "PONG" {
		t.Fatalf("PING after Restart = %q, %v; want PONG", got, err)
	}
	if got, err := Do(s.Addr, "GET", "k"); err != nil || got != "" {
		t.Fatalf("GET k after Restart = %q, %v; want empty (no persistence)", got, err)
	}
}

func TestCluster(t *testing.T) {
	c := StartCluster(t)
	if len(c.Addrs) != 3 {
		t.Fatalf("len(Addrs) = %d, want 3", len(c.Addrs))
	}
	for _, a := range c.Addrs {
		info, err := Do(a, "CLUSTER", "INFO")
		if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:3") {
			t.Fatalf("CLUSTER INFO %s = %q, %v; want cluster_state:ok with 3 nodes", a, info, err)
		}
	}
}
