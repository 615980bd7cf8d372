package redistest

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of three masters and no replicas, each node on
// its own loopback port; Addrs are the nodes' addresses.
type Cluster struct {
	Addrs []string

	Nodes []*Server
}

// StartCluster starts three cluster-enabled redis-server nodes, joins them
// with `redis-cli --cluster create`, and waits until every node reports
// cluster_state:ok. The nodes are stopped when the test ends.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		tb.Fatalf("redistest: redis-cli not found on PATH: %v; %s", err, installHint)
	}
	c := &Cluster{}
	for range 3 {
		s := newServer(tb, true)
		tb.Cleanup(s.Stop)
		c.Nodes = append(c.Nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
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
