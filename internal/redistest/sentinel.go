package redistest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// StartSentinel starts one Redis Sentinel on a free loopback port that
// monitors master under the name "mymaster" (quorum 1, master down after
// 5s), and waits until it knows the master. It returns the sentinel's
// address; the sentinel is stopped when the test ends.
func StartSentinel(tb testing.TB, master *Server) string {
	tb.Helper()
	return StartSentinelFor(tb, master, 5*time.Second, nil)
}

// StartSentinelFor is StartSentinel with the time after which the sentinel
// considers an unanswering master down (and fails over to a replica), and
// the replicas it must know before it returns (it learns them from the
// master's INFO).
func StartSentinelFor(tb testing.TB, master *Server, downAfter time.Duration, replicas []*Server) string {
	tb.Helper()
	return startSentinel(tb, master, downAfter, replicas, "", "", nil).Addr
}

// StartSentinelServer is StartSentinelFor returning the Sentinel's
// process, for tests that stop, restart or pause it.
func StartSentinelServer(tb testing.TB, master *Server, downAfter time.Duration, replicas []*Server) *Server {
	tb.Helper()
	return startSentinel(tb, master, downAfter, replicas, "", "", nil)
}

// StartSentinelAuth is StartSentinel for a master whose clients must give
// the password masterPass (its requirepass, or the default user's), with
// a Sentinel that requires sentinelPass of its own clients (its
// requirepass): so the two differ, as they may in production. The
// Sentinel logs in to the master with masterPass (sentinel auth-pass).
// DoAuth reaches the Sentinel.
func StartSentinelAuth(tb testing.TB, master *Server, masterPass, sentinelPass string) string {
	tb.Helper()
	return startSentinel(tb, master, 5*time.Second, nil, masterPass, sentinelPass, nil).Addr
}

// StartTLSSentinel is StartSentinel for a master started by
// StartMTLSServer, monitored on its TLS port, with a Sentinel that also
// serves TLS clients, on the returned Server's TLSAddr (Addr stays plain,
// for Do), with the certificate and key in the PEM files cert and key,
// and requires their certificates (tls-auth-clients yes), which a CA in
// the PEM file ca must have signed. The Sentinel speaks TLS to the master
// (tls-replication yes), presenting that certificate, which the master
// must trust, and verifying the master's against ca: so ca is a bundle of
// the servers' CA and the clients'. The file ca is read again when the
// Sentinel is restarted.
func StartTLSSentinel(tb testing.TB, master *Server, cert, key, ca string) *Server {
	tb.Helper()
	if master.TLSAddr == "" {
		tb.Fatalf("redistest: StartTLSSentinel: master %s serves no TLS", master.Addr)
	}
	return startSentinel(tb, master, 5*time.Second, nil, "", "", &[3]string{cert, key, ca})
}

// startSentinel starts a Sentinel; tlsFiles, if set, are the
// certificate, key and CA files of StartTLSSentinel.
func startSentinel(tb testing.TB, master *Server, downAfter time.Duration, replicas []*Server, masterPass, sentinelPass string, tlsFiles *[3]string) *Server {
	tb.Helper()
	host, port, _ := net.SplitHostPort(master.Addr)
	if tlsFiles != nil {
		host, port, _ = net.SplitHostPort(master.TLSAddr)
	}
	var lastErr error
	for range 20 {
		p, err := freePort(false)
		if err != nil {
			lastErr = err
			continue
		}
		tp := 0
		if tlsFiles != nil {
			if tp, err = freePort(false); err != nil || tp == p {
				lastErr = fmt.Errorf("no second free port: %v", err)
				continue
			}
		}
		dir := tb.TempDir()
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\n", p, dir)
		if tlsFiles != nil {
			text += fmt.Sprintf("tls-port %d\ntls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\ntls-auth-clients yes\ntls-replication yes\n",
				tp, tlsFiles[0], tlsFiles[1], tlsFiles[2])
		}
		text += fmt.Sprintf("sentinel monitor mymaster %s %s 1\n"+
			"sentinel down-after-milliseconds mymaster %d\nsentinel failover-timeout mymaster %d\n",
			host, port, downAfter.Milliseconds(), max(10*downAfter.Milliseconds(), 1000))
		if masterPass != "" {
			text += "sentinel auth-pass mymaster " + masterPass + "\n"
		}
		if sentinelPass != "" {
			text += "requirepass " + sentinelPass + "\n"
		}
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			tb.Fatalf("redistest: %v", err)
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), tb: tb, port: p, dir: dir, sentinelConf: conf}
		if tp != 0 {
			s.TLSAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(tp))
		}
		if lastErr = s.start(); lastErr != nil {
			continue
		}
		tb.Cleanup(s.close)
		shortTilt(tb, s.Addr, sentinelPass)
		deadline := time.Now().Add(startTimeout)
		for {
			got, err := DoAuth(s.Addr, "", sentinelPass, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster")
			ok := err == nil && got == host+"\n"+port
			if ok && (masterPass != "" || tlsFiles != nil) {
				// The master is known from the config alone until the
				// Sentinel has logged in to it (over TLS) and read its
				// INFO (run_id).
				m, err := DoAuth(s.Addr, "", sentinelPass, "SENTINEL", "MASTER", "mymaster")
				_, after, _ := strings.Cut(m, "\nrunid\n")
				ok = err == nil && after != "" && !strings.HasPrefix(after, "\n")
			}
			if ok && len(replicas) > 0 {
				known, err := DoAuth(s.Addr, "", sentinelPass, "SENTINEL", "REPLICAS", "mymaster")
				for _, r := range replicas {
					ok = ok && err == nil && strings.Contains(known, r.Addr)
				}
			}
			if ok {
				return s
			}
			if time.Now().After(deadline) {
				tb.Fatalf("redistest: sentinel %s does not know its master %s and replicas: %q %v", s.Addr, master.Addr, got, err)
			}
			pollPause()
		}
	}
	tb.Fatalf("redistest: cannot start a sentinel: %v; %s", lastErr, installHint)
	return nil
}

// sentinelTiltPeriod is how long a Sentinel started here waits, after its
// timer ran late (SENTINEL DEBUG tilt-trigger, 2 s), before it acts on
// what it sees again: Sentinel's own 30 s, on a loaded machine whose
// pause made the timer late, was longer than the tests wait for a
// failover (30 s), and its failover came after they had failed.
const sentinelTiltPeriod = "2000" // ms

// shortTilt sets the Sentinel at addr's tilt period to
// sentinelTiltPeriod (until it restarts). A Sentinel older than Redis
// 7.0, without SENTINEL DEBUG, keeps its own.
func shortTilt(tb testing.TB, addr, pass string) {
	tb.Helper()
	_, err := DoAuth(addr, "", pass, "SENTINEL", "DEBUG", "tilt-period", sentinelTiltPeriod)
	if err != nil && !strings.Contains(strings.ToLower(err.Error()), "unknown") {
		tb.Fatalf("redistest: SENTINEL DEBUG tilt-period on %s: %v", addr, err)
	}
}

// StartReplica starts a redis-server replicating master and waits until
// its link to the master is up. It is stopped when the test ends.
func StartReplica(tb testing.TB, master *Server) *Server {
	tb.Helper()
	host, port, _ := net.SplitHostPort(master.Addr)
	s := newServerWith(tb, []string{"--replicaof", host, port})
	tb.Cleanup(s.close)
	deadline := time.Now().Add(startTimeout)
	for {
		info, err := Do(s.Addr, "INFO", "replication")
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return s
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: replica %s of %s not linked: %q %v", s.Addr, master.Addr, info, err)
		}
		pollPause()
	}
}

// WaitReplicated waits until replica has everything master had written
// when it was called: its replication offset reaches the master's. (WAIT
// on a connection of its own would not do: it waits only for that
// connection's writes, and one that wrote nothing returns at once.)
func WaitReplicated(tb testing.TB, master, replica *Server) {
	tb.Helper()
	offset := func(addr, field string) int64 {
		info, err := Do(addr, "INFO", "replication")
		if err != nil {
			tb.Fatalf("redistest: INFO replication on %s: %v", addr, err)
		}
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					tb.Fatalf("redistest: %s on %s: %q", field, addr, v)
				}
				return n
			}
		}
		tb.Fatalf("redistest: no %s in INFO replication on %s", field, addr)
		return 0
	}
	want := offset(master.Addr, "master_repl_offset")
	deadline := time.Now().Add(startTimeout)
	for offset(replica.Addr, "slave_repl_offset") < want {
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: replica %s not at the master's offset %d after %v", replica.Addr, want, startTimeout)
		}
		pollPause()
	}
}
