package redisstore

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
)

// RunIDs identifies the Redis servers the Store decides on: the run_id
// (INFO server) of each, with its address on a Cluster. Redis draws a new
// run_id at every start, so the answer changes when a server restarts
// (maybe without its data) or when a failover (Sentinel, a Cluster
// replica promoted) puts another server in its place; a caller that keeps
// what Redis answered (the over-limit cache of package fleet) compares it
// from time to time and lets go of what it kept when it changes. Without a
// call in between, a restart is invisible otherwise: the connection is
// redialled at the next call, which then succeeds.
//
// On a single node it asks through each of the Store's connections, so
// that one the server closed while idle is met (and redialled) here rather
// than by the next decision, which would fail once; a call that fails so
// is asked again at once, on the connection redialled, so that the first
// RunIDs after a restart already tells it. It fails, wrapping
// sluice.ErrStoreUnavailable, when a server does not answer within the
// timeout.
//
// On a Cluster it asks each node the client holds, all together, and
// leaves out those that no master's CLUSTER SLOTS (asked in the same
// round trip) lists: a node that left the Cluster and runs on, or hangs,
// which the client, never redirected away from it, may hold for ever.
// One that does not answer fails RunIDs only if a master lists it.
//
// The same replies tell each server's version: RunIDs keeps them, for
// CheckVersions and Require to check the servers in place now rather than
// those New met (a failover to a replica on an older Redis).
func (s *Store) RunIDs(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	if !s.opts.Cluster {
		// Through each client: a connection the server closed while no
		// call was in flight (a restart) fails its next call once (EOF);
		// met here, it is redialled before a decision meets it.
		var id string
		var servers []serverVersion
		for _, c := range []rueidis.Client{s.c, s.solo} {
			if c == nil {
				continue
			}
			info, err := serverInfo(ctx, c)
			if err != nil {
				return "", fmt.Errorf("redisstore: run_id: %w: %w", sluice.ErrStoreUnavailable, err)
			}
			id = runID(info)
			if servers == nil {
				// The address the client reaches (a Sentinel's master:
				// the one it follows now).
				var addr string
				for a := range c.Nodes() {
					addr = a
				}
				servers = []serverVersion{infoVersion(addr, info)}
			}
		}
		s.servers.Store(&servers)
		return id, nil
	}
	nodes := s.c.Nodes()
	addrs := make([]string, 0, len(nodes))
	for addr := range nodes {
		addrs = append(addrs, addr)
	}
	slices.Sort(addrs)
	// Together: a node that does not answer (gone silent) holds up
	// none of the others, whose views may leave it out.
	type reply struct {
		info  string
		slots []rueidis.RedisMessage
		err   error
	}
	replies := make([]reply, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() {
			r := &replies[i]
			r.info, r.slots, r.err = clusterNodeInfo(ctx, nodes[addr])
		})
	}
	wg.Wait()
	members := map[string]bool{} // the nodes the Cluster's masters list
	for i, addr := range addrs {
		if replies[i].err != nil {
			continue
		}
		if listed, owner := slotsView(addr, replies[i].slots); owner {
			for _, a := range listed {
				members[a] = true
			}
		}
	}
	if !slices.ContainsFunc(addrs, func(a string) bool { return members[a] }) {
		members = nil // addresses not told as the client's: none left out
	}
	for i, addr := range addrs {
		if err := replies[i].err; err != nil && (members == nil || members[addr]) {
			return "", fmt.Errorf("redisstore: run_id of %s: %w: %w", addr, sluice.ErrStoreUnavailable, err)
		}
	}
	var b strings.Builder
	servers := make([]serverVersion, 0, len(addrs))
	for i, addr := range addrs {
		// A node the client still holds that the Cluster no longer
		// lists (it left, and nothing redirected the client since, as
		// nothing is routed to a replica; or it hangs, its connection
		// never closed) is not one of its servers.
		if members != nil && !members[addr] {
			continue
		}
		fmt.Fprintf(&b, "%s=%s ", addr, runID(replies[i].info))
		servers = append(servers, infoVersion(addr, replies[i].info))
	}
	s.servers.Store(&servers)
	return b.String(), nil
}

// clusterNodeInfo is a Cluster node's INFO server and CLUSTER SLOTS, in
// one round trip, asked again once as serverInfo does.
func clusterNodeInfo(ctx context.Context, c rueidis.Client) (string, []rueidis.RedisMessage, error) {
	ask := func() (string, []rueidis.RedisMessage, error) {
		r := c.DoMulti(ctx, c.B().Info().Section("server").Build(), c.B().ClusterSlots().Build())
		info, err := r[0].ToString()
		if err != nil {
			return "", nil, err
		}
		slots, err := r[1].ToArray()
		return info, slots, err
	}
	info, slots, err := ask()
	if _, redisErr := rueidis.IsRedisErr(err); err != nil && !redisErr && ctx.Err() == nil {
		info, slots, err = ask()
	}
	return info, slots, err
}

// slotsView returns the nodes (masters and replicas) that slots, the
// CLUSTER SLOTS of the node at addr, lists, and whether that node owns
// slots there: only such a node's view is the Cluster's (one that left
// owns none, and may still list itself). Addresses are made as the client
// makes them (rueidis's parseEndpoint): an empty host is addr's, "?" is
// no address.
func slotsView(addr string, slots []rueidis.RedisMessage) (listed []string, owner bool) {
	host, _, _ := net.SplitHostPort(addr)
	for _, r := range slots {
		f, err := r.ToArray()
		if err != nil || len(f) < 3 {
			continue
		}
		for i, n := range f[2:] {
			nf, err := n.ToArray()
			if err != nil || len(nf) < 2 {
				continue
			}
			h, _ := nf[0].ToString()
			port, err := nf[1].AsInt64()
			if err != nil || h == "?" {
				continue
			}
			if h == "" {
				h = host
			}
			a := net.JoinHostPort(h, strconv.FormatInt(port, 10))
			listed = append(listed, a)
			owner = owner || (i == 0 && a == addr)
		}
	}
	return listed, owner
}

// serverInfo is c's INFO server, asked again once if the first ask fails
// while ctx lasts: a connection the server closed while idle (a restart)
// fails its next call once, and the second goes out on a new one.
func serverInfo(ctx context.Context, c rueidis.Client) (string, error) {
	info, err := c.Do(ctx, c.B().Info().Section("server").Build()).ToString()
	if _, redisErr := rueidis.IsRedisErr(err); err != nil && !redisErr && ctx.Err() == nil {
		info, err = c.Do(ctx, c.B().Info().Section("server").Build()).ToString()
	}
	return info, err
}

// runID is the run_id line's value in an INFO reply, or "" without one.
func runID(info string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, "run_id:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
