package redistest

import (
	"bytes"
	"fmt"
	"net"
	"os/exec"
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
// with `redis-cli --cluster create`, and waits until every node reports
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

// startCluster starts three nodes with start and joins them.
func startCluster(tb testing.TB, start func() *Server) *Cluster {
	tb.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		tb.Fatalf("redistest: redis-cli not found on PATH: %v; %s", err, installHint)
	}
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
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	cmd := exec.Command("redis-cli", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := runBounded(cmd, startTimeout); err != nil {
		tb.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out.String())
	}
	deadline := time.Now().Add(startTimeout)
	for _, addr := range c.Addrs {
		for {
			info, err := Do(addr, "CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") {
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

func runBounded(cmd *exec.Cmd, d time.Duration) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- cmd.Wait() }()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case err := <-errc:
		return err
	case <-timer.C:
		cmd.Process.Kill()
		<-errc
		return fmt.Errorf("timed out after %v", d)
	}
}
