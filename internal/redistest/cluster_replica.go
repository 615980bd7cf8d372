package redistest

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// StartReplica starts a cluster-enabled node and makes it a replica of
// the master at c.Addrs[of]. The Cluster tells its clients (CLUSTER SLOTS)
// the address that told returns for the node's own, or its own with told
// nil: a relay in front of it, such as an Older, started by told. It
// returns once every master's CLUSTER SLOTS lists the replica there, and
// the address told. The node is stopped when the test ends.
func (c *Cluster) StartReplica(tb testing.TB, of int, told func(addr string) string) (*Server, string) {
	tb.Helper()
	s := newServer(tb, true)
	tb.Cleanup(s.close)
	at := s.Addr
	if told != nil {
		at = told(s.Addr)
		host, port, err := net.SplitHostPort(at)
		if err != nil {
			tb.Fatalf("redistest: StartReplica: %v", err)
		}
		for _, kv := range [][2]string{{"cluster-announce-ip", host}, {"cluster-announce-port", port}} {
			if _, err := Do(s.Addr, "CONFIG", "SET", kv[0], kv[1]); err != nil {
				tb.Fatalf("redistest: StartReplica: CONFIG SET %s: %v", kv[0], err)
			}
		}
	}
	master := c.Addrs[of]
	id, err := Do(master, "CLUSTER", "MYID")
	if err != nil {
		tb.Fatal(err)
	}
	// It meets every master, rather than one whose gossip would take
	// seconds to reach the others.
	for _, m := range c.Addrs {
		bus, err := busPort(m)
		if err != nil {
			tb.Fatal(err)
		}
		host, port, _ := net.SplitHostPort(m)
		if _, err := Do(s.Addr, "CLUSTER", "MEET", host, port, bus); err != nil {
			tb.Fatalf("redistest: StartReplica: CLUSTER MEET %s: %v", m, err)
		}
	}
	// REPLICATE needs the master known first (MEET's handshake).
	waitCluster(tb, "the new node's CLUSTER REPLICATE of "+master, func() (bool, error) {
		_, err := Do(s.Addr, "CLUSTER", "REPLICATE", id)
		return err == nil, nil
	})
	waitCluster(tb, "the masters' CLUSTER SLOTS to list the replica at "+at, func() (bool, error) {
		for _, m := range c.Addrs {
			if ok, err := slotsList(m, at); !ok || err != nil {
				return false, err
			}
		}
		return true, nil
	})
	return s, at
}

// Forget takes the node s, told to clients at the address at, out of
// the Cluster while it runs on, as an operator removing a node does: it
// forgets the Cluster (CLUSTER RESET HARD), and every master forgets it
// (CLUSTER FORGET). It returns once no master's CLUSTER SLOTS lists at.
func (c *Cluster) Forget(tb testing.TB, s *Server, at string) {
	tb.Helper()
	id, err := Do(s.Addr, "CLUSTER", "MYID")
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := Do(s.Addr, "CLUSTER", "RESET", "HARD"); err != nil {
		tb.Fatalf("redistest: Forget: CLUSTER RESET on %s: %v", s.Addr, err)
	}
	for _, m := range c.Addrs {
		if _, err := Do(m, "CLUSTER", "FORGET", id); err != nil && !strings.Contains(err.Error(), "Unknown node") {
			tb.Fatalf("redistest: Forget: CLUSTER FORGET on %s: %v", m, err)
		}
	}
	waitCluster(tb, "the masters' CLUSTER SLOTS to list "+at+" no more", func() (bool, error) {
		for _, m := range c.Addrs {
			if ok, err := slotsList(m, at); ok || err != nil {
				return false, err
			}
		}
		return true, nil
	})
}

// slotsList reports whether the CLUSTER SLOTS of the node at addr lists
// a node at at (host and port).
func slotsList(addr, at string) (bool, error) {
	slots, err := Do(addr, "CLUSTER", "SLOTS")
	if err != nil {
		return false, err
	}
	host, port, _ := net.SplitHostPort(at)
	return strings.Contains("\n"+slots+"\n", "\n"+host+"\n"+port+"\n"), nil
}

// waitCluster polls done until it reports true, failing tb after a
// minute (a Cluster's nodes tell each other of a change in their pings,
// once a second or so, later on a loaded machine) or at its error.
func waitCluster(tb testing.TB, what string, done func() (bool, error)) {
	tb.Helper()
	const timeout = time.Minute
	deadline := time.Now().Add(timeout)
	for {
		ok, err := done()
		if err != nil {
			tb.Fatalf("redistest: waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatal(fmt.Sprintf("redistest: %s not seen after %v", what, timeout))
		}
		pollPause()
	}
}
