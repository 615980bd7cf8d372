package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

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
	var b strings.Builder
	servers := make([]serverVersion, 0, len(addrs))
	for _, addr := range addrs {
		n := nodes[addr]
		info, err := serverInfo(ctx, n)
		if err != nil {
			return "", fmt.Errorf("redisstore: run_id of %s: %w: %w", addr, sluice.ErrStoreUnavailable, err)
		}
		fmt.Fprintf(&b, "%s=%s ", addr, runID(info))
		servers = append(servers, infoVersion(addr, info))
	}
	s.servers.Store(&servers)
	return b.String(), nil
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
