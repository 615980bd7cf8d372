package redistest

import (
	"maps"
	"net"
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
	// Every node sees the map redis-cli --cluster create makes (which
	// tests of the shard placement assume), each master with a config
	// epoch of its own.
	want := map[string]string{c.Addrs[0]: "0-5460", c.Addrs[1]: "5461-10922", c.Addrs[2]: "10923-16383"}
	for _, a := range c.Addrs {
		nodes, err := Do(a, "CLUSTER", "NODES")
		if err != nil {
			t.Fatal(err)
		}
		got, epochs := map[string]string{}, map[string]bool{}
		for _, l := range strings.Split(strings.TrimSpace(nodes), "\n") {
			f := strings.Fields(l)
			if len(f) < 8 {
				t.Fatalf("CLUSTER NODES %s: line %q", a, l)
			}
			addr, _, _ := strings.Cut(f[1], "@")
			got[addr] = strings.Join(f[8:], " ")
			epochs[f[6]] = true
			if !strings.Contains(f[2], "master") || f[7] != "connected" {
				t.Errorf("CLUSTER NODES %s: %q, want a connected master", a, l)
			}
		}
		if !maps.Equal(got, want) || len(epochs) != 3 {
			t.Errorf("CLUSTER NODES %s: slots %v, config epochs %v; want %v and 3 epochs", a, got, epochs, want)
		}
	}
}

// TestStoppedPortHeld: while a server is stopped (Redis down, until
// Restart), its port stays its own: another test's freePort does not
// find it free, and a connection is refused as by a stopped server.
// Before, the port was free for the outage: another test process could
// start its redis-server there, and this test's clients talk to it.
func TestStoppedPortHeld(t *testing.T) {
	for _, c := range []struct {
		name  string
		start func(testing.TB) *Server
	}{
		{"server", StartServer},
		{"cluster node", func(tb testing.TB) *Server { return StartCluster(tb).Nodes[1] }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := c.start(t)
			ports := []int{s.port}
			if s.cluster {
				ports = append(ports, s.port+10000)
			}
			s.Stop()
			for _, p := range ports {
				if err := probePort(p); err == nil {
					t.Errorf("port %d of the stopped %s %s: free for another test's server before Restart, want held", p, c.name, s.Addr)
				}
			}
			if _, err := Do(s.Addr, "PING"); err == nil || !strings.Contains(err.Error(), "connection refused") {
				t.Errorf("PING the stopped %s %s: %v, want connection refused", c.name, s.Addr, err)
			}
			s.Restart()
			if got, err := Do(s.Addr, "PING"); err != nil || got != "PONG" {
				t.Fatalf("PING after Restart = %q, %v; want PONG", got, err)
			}
			s.Stop()
		})
	}
}

// TestRestartPortTaken: a port taken while the server was down, by a bind
// with SO_REUSEADDR to that very port (which the hold cannot refuse),
// fails the restart with an error that says so.
func TestRestartPortTaken(t *testing.T) {
	s := StartServer(t)
	s.Stop()
	ln, err := net.Listen("tcp", s.Addr) // Go listens with SO_REUSEADDR
	if err != nil {
		t.Fatalf("listen on the stopped server's %s: %v", s.Addr, err)
	}
	defer ln.Close()
	if err := s.restart(); err == nil || !strings.Contains(err.Error(), "taken by another process while the server was down") {
		t.Fatalf("restart with its port taken: %v, want an error saying the port was taken while it was down", err)
	}
}

// TestReplicaSyncNotDelayed: a master serves a replica's full sync at
// once, not after Redis' default repl-diskless-sync-delay of 5 s, which
// every test with a replica (StartReplica, REPLICAOF) waited out for
// nothing but the sync itself.
func TestReplicaSyncNotDelayed(t *testing.T) {
	s := StartServer(t)
	got, err := Do(s.Addr, "CONFIG", "GET", "repl-diskless-sync-delay")
	if err != nil || got != "repl-diskless-sync-delay\n0" {
		t.Fatalf("CONFIG GET repl-diskless-sync-delay = %q, %v; want 0", got, err)
	}
	r := StartReplica(t, s)
	if info, err := Do(r.Addr, "INFO", "replication"); err != nil || !strings.Contains(info, "master_link_status:up") {
		t.Fatalf("replica %s not linked: %q %v", r.Addr, info, err)
	}
}
