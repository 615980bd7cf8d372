package redistest

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of three masters and no replicas, each node on
// its own loopback port; Addrs are the nodes' addresses.
type Cluster struct {
	Addrs []string
	// TLSAddrs are where the nodes of StartTLSCluster serve TLS; nil for
	// the others.
	TLSAddrs []string

	Nodes []*Server
}

// StartCluster starts three cluster-enabled redis-server nodes, joins them
// (as `redis-cli --cluster create` does), and waits until every node reports
// cluster_state:ok. The nodes are stopped when the test ends.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	return startCluster(tb, func() *Server { return newServer(tb, true) })
}

// StartTLSCluster is StartCluster whose nodes also serve TLS clients, on
// TLSAddrs, with the certificate and key in the PEM files cert and key,
// and speak TLS to each other on the cluster bus (tls-cluster yes): each
// presents that certificate to the others and trusts the CA in the PEM
// file ca, so the certificate must be valid for 127.0.0.1 as a server's
// and as a client's (tlstest's Peer). TLS clients are not asked for a
// certificate, and the Cluster tells them the TLS ports (CLUSTER SLOTS,
// MOVED). Addrs stay plain, for setting the nodes up with Do.
func StartTLSCluster(tb testing.TB, cert, key, ca string) *Cluster {
	tb.Helper()
	return startTLSCluster(tb, cert, key, ca, false)
}

// StartMTLSCluster is StartTLSCluster with tls-auth-clients yes: TLS
// clients must present a certificate that a CA in the PEM file ca signed
// (ca is also what the nodes verify each other's certificate against, so
// a bundle of the nodes' CA and the clients'). CONFIG SET
// tls-ca-cert-file on each node (through Addrs) changes it.
func StartMTLSCluster(tb testing.TB, cert, key, ca string) *Cluster {
	tb.Helper()
	return startTLSCluster(tb, cert, key, ca, true)
}

func startTLSCluster(tb testing.TB, cert, key, ca string, authClients bool) *Cluster {
	tb.Helper()
	return startCluster(tb, func() *Server {
		s, err := tryStart(tb, func() (*Server, error) {
			port, err := freePort(true)
			if err != nil {
				return nil, err
			}
			tport, err := freePort(false)
			if err != nil {
				return nil, err
			}
			if tport == port || tport == port+10000 {
				return nil, fmt.Errorf("port %d drawn twice", tport)
			}
			s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), TLSAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(tport)),
				tb: tb, port: port, tlsPort: tport, tlsFiles: [2]string{cert, key}, dir: tb.TempDir(), cluster: true,
				extra: []string{"--tls-ca-cert-file", ca, "--tls-cluster", "yes"}}
			if authClients {
				s.tlsClientCA, s.extra = ca, []string{"--tls-cluster", "yes"}
			}
			return s, nil
		})
		if err != nil {
			tb.Fatalf("redistest: cannot start a TLS cluster node: %v; %s (redis-server must be built with TLS)", err, installHint)
		}
		return s
	})
}

// startCluster starts three nodes with start and joins them as
// `redis-cli --cluster create` does (the same slot map: 0–5460, 5461–10922,
// 10923–16383; config epochs 1, 2, 3), but polls every node for the join
// where redis-cli checks once a second, which made a start take 3 to 9 s
// instead of about 2 (a master waits 2 s from its start before it reports
// cluster_state:ok, Redis' CLUSTER_WRITABLE_DELAY, whatever the join).
func startCluster(tb testing.TB, start func() *Server) *Cluster {
	tb.Helper()
	c := &Cluster{}
	for range 3 {
		s := start()
		tb.Cleanup(s.close)
		c.Nodes = append(c.Nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
		if s.TLSAddr != "" {
			c.TLSAddrs = append(c.TLSAddrs, s.TLSAddr)
		}
	}
	if err := join(c.Addrs); err != nil {
		tb.Fatalf("redistest: cannot join the cluster %v: %v", c.Addrs, err)
	}
	deadline := time.Now().Add(startTimeout)
	for _, addr := range c.Addrs {
		for {
			info, err := joined(addr)
			if err == nil && info == "" {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("redistest: cluster node %s not ok after %v: %v %q", addr, startTimeout, err, info)
			}
			pollPause()
		}
	}
	return c
}

// joined returns "" once the node at addr reports cluster_state:ok and
// its links to the two others connected (so that what it sends on the
// cluster bus, such as a PUBLISH, reaches them); otherwise what it
// reports.
func joined(addr string) (string, error) {
	info, err := Do(addr, "CLUSTER", "INFO")
	if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:3\r\n") {
		return info, err
	}
	nodes, err := Do(addr, "CLUSTER", "NODES")
	if err != nil {
		return nodes, err
	}
	if n := strings.Count(nodes, " connected"); n != 3 {
		return nodes, nil
	}
	return "", nil
}

// join gives each of the nodes at addrs a third of the slots and a config
// epoch of its own, then has them meet each other, on their cluster bus
// ports (a TLS cluster's is its TLS port's + 10000).
func join(addrs []string) error {
	last := [3]int{5460, 10922, 16383} // redis-cli's map of 3 masters
	lo := 0
	for i, addr := range addrs {
		hi := last[i]
		args := []string{"CLUSTER", "ADDSLOTS"}
		for sl := lo; sl <= hi; sl++ {
			args = append(args, strconv.Itoa(sl))
		}
		if _, err := Do(addr, args...); err != nil {
			return fmt.Errorf("%s: CLUSTER ADDSLOTS %d-%d: %w", addr, lo, hi, err)
		}
		if _, err := Do(addr, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return fmt.Errorf("%s: CLUSTER SET-CONFIG-EPOCH: %w", addr, err)
		}
		lo = hi + 1
	}
	// Each meets those after it: every node knows the others at once,
	// where through the first's gossip (one ping a second) the others
	// took 1 to 7 s to link to each other.
	buses := make([]string, len(addrs))
	for i, addr := range addrs {
		bus, err := busPort(addr)
		if err != nil {
			return err
		}
		buses[i] = bus
	}
	for i, from := range addrs {
		for j, addr := range addrs[i+1:] {
			host, port, _ := net.SplitHostPort(addr)
			if _, err := Do(from, "CLUSTER", "MEET", host, port, buses[i+1+j]); err != nil {
				return fmt.Errorf("%s: CLUSTER MEET %s: %w", from, addr, err)
			}
		}
	}
	return nil
}

// busPort returns the cluster bus port of the node at addr, from the
// "ip:port@cport" of its own line of CLUSTER NODES.
func busPort(addr string) (string, error) {
	nodes, err := Do(addr, "CLUSTER", "NODES")
	if err != nil {
		return "", fmt.Errorf("%s: CLUSTER NODES: %w", addr, err)
	}
	for _, l := range strings.Split(nodes, "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || !strings.Contains(f[2], "myself") {
			continue
		}
		_, bus, ok := strings.Cut(f[1], "@")
		bus, _, _ = strings.Cut(bus, ",")
		if _, err := strconv.Atoi(bus); !ok || err != nil {
			return "", fmt.Errorf("%s: no cluster bus port in CLUSTER NODES' %q", addr, f[1])
		}
		return bus, nil
	}
	return "", fmt.Errorf("%s: no myself line in CLUSTER NODES: %q", addr, nodes)
}
