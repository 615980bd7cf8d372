package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/internal/sim"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

const simulateUsage = `usage: sluice simulate -rate N/UNIT [flags] [-trace FILE] [-plot FILE.svg]

Replays a trace of requests through an algorithm and prints each decision.

Input (the -trace file, or standard input): one request per line,
  t,key[,cost]
t is seconds since the Unix epoch with up to 6 decimals (12.000250); cost is
a whole number (default 1); # starts a comment; times must not go backwards.

Output (standard output): a header line, then one line per request:
  t,key,cost,allowed,remaining,retry_after,delay
A summary (admitted, rejected, per key) goes to standard error.

-store redis replays the trace through the Redis at -redis, in database
-redis-db, as -redis-username; a password (Redis's requirepass, or that
user's) is read from the environment variable REDIS_PASSWORD, never from
the command line. -redis-tls connects over TLS (a Redis that requires it);
-redis-tls-ca, -redis-tls-cert, -redis-tls-key and -redis-tls-server-name
are store.redis.tls's keys, and each turns TLS on.

Exit status: 0 done; 1 bad input, bad flag value or store failure (the
message names the trace line); 2 the command line cannot be parsed.

Flags:
`

// simulate runs `sluice simulate`.
func simulate(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), simulateUsage)
		fs.PrintDefaults()
	}
	algName := fs.String("algorithm", "token_bucket", "`NAME`: token_bucket, leaky_bucket, fixed_window, sliding_window_log, sliding_window_counter or gcra")
	rate := fs.String("rate", "", "the limit, `N/UNIT`: N requests per UNIT (s, m, h, d or a Go duration such as 250ms); required")
	burst := fs.Int64("burst", 0, "bucket or queue size `N` for token_bucket, gcra and leaky_bucket (0: the rate's N; a window takes no other)")
	segments := fs.Int("segments", 0, "sub-windows `N` of sliding_window_counter (0: 1, the classic two-window estimate)")
	storeName := fs.String("store", "memory", "where the counters live: `memory|redis`")
	redisAddr := fs.String("redis", "127.0.0.1:6379", "Redis `ADDR` for -store redis")
	redisDB := fs.Int("redis-db", 0, "the Redis database `N` for -store redis, as store.redis.db")
	redisUser := fs.String("redis-username", "", "the Redis ACL user `NAME` for -store redis, as store.redis.username; its password, or the default user's, is read from the environment variable "+redisPasswordEnv+" (never a flag)")
	redisTLS := addSimTLSFlags(fs)
	tracePath := fs.String("trace", "-", "the trace `FILE`; - for standard input")
	plotPath := fs.String("plot", "", "also draw the run as an SVG picture into `FILE.svg`")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice simulate: unexpected argument %q (the trace is read from -trace FILE or standard input)\n", fs.Arg(0))
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "sluice simulate: "+format+"\n", a...)
		return 1
	}

	alg, err := sluice.ParseAlgorithm(*algName)
	if err != nil {
		return fail("-algorithm: %v", err)
	}
	if *rate == "" {
		return fail("-rate is required, such as -rate 10/s or -rate 100/m")
	}
	limit, err := sluice.ParseLimit(*rate)
	if err != nil {
		return fail("-rate: %v", err)
	}
	if *burst < 0 {
		return fail("-burst %d: must not be negative", *burst)
	}
	if *segments < 0 {
		return fail("-segments %d: must not be negative", *segments)
	}
	// Only the sliding window counter has sub-windows: the others ignore
	// -segments, whatever its value, so that one command line runs through
	// every algorithm. Only the buckets and gcra take a burst: a window
	// admits its rate each period, so a -burst other than the rate is
	// refused there, as the library and the daemon's config refuse it.
	if alg != sluice.SlidingWindowCounter {
		*segments = 0
	}
	limit = limit.WithBurst(*burst).WithSegments(*segments)
	if err := alg.ValidateLimit(limit); err != nil && limit.Validate() == nil {
		if key, msg := rules.AlgorithmLimitError(err); key == "burst" {
			n, why, _ := strings.Cut(msg, " ")
			return fail("-burst %s: %s", n, why)
		}
	}
	if err := alg.ValidateLimit(limit); err != nil {
		return fail("-rate %s -burst %d -segments %d: %v", *rate, *burst, *segments, err)
	}
	if p := config.DBProblem(*redisDB); p != "" {
		return fail("-redis-db: %s", p)
	}
	if *storeName != "redis" {
		var redisOnly []string
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "redis-db" || f.Name == "redis-username" || slices.Contains(simTLSFlagNames, f.Name) {
				redisOnly = append(redisOnly, "-"+f.Name)
			}
		})
		if len(redisOnly) > 0 {
			return fail("%s: for -store redis only (-store is %s)", strings.Join(redisOnly, ", "), *storeName)
		}
	}
	tlsConfig, err := redisTLS.config(fs)
	if err != nil {
		return fail("%s", strings.ReplaceAll(err.Error(), "\n", "\nsluice simulate: "))
	}
	if *plotPath != "" && !strings.HasSuffix(strings.ToLower(*plotPath), ".svg") {
		return fail("-plot %s: the plot is SVG; name the file *.svg", *plotPath)
	}

	var (
		store sluice.Store
		rs    *redisstore.Store
	)
	switch *storeName {
	case "memory":
		store = memstore.New(memstore.Options{})
	case "redis":
		s, err := simRedisStore(ctx, *redisAddr, *redisDB, *redisUser, os.Getenv(redisPasswordEnv), tlsConfig)
		if err != nil {
			return fail("-store redis: %v%s", err, simRedisHint(err))
		}
		defer s.Close()
		store, rs = s, s
	default:
		return fail("-store %q: want memory or redis", *storeName)
	}

	trace, name := stdin, "stdin"
	if *tracePath != "-" && *tracePath != "" {
		f, err := os.Open(*tracePath)
		if err != nil {
			return fail("-trace: %v", err)
		}
		defer f.Close()
		trace, name = f, *tracePath
	}

	var plot *os.File
	if *plotPath != "" {
		// Made before the run, so that a plot that cannot be written is
		// said at once, not after a long trace; renamed into place once
		// drawn, so that a failed run leaves the old plot as it was.
		plot, err = os.CreateTemp(filepath.Dir(*plotPath), "."+filepath.Base(*plotPath)+".*")
		if err != nil {
			return fail("-plot: %v", err)
		}
		defer func() {
			plot.Close()
			os.Remove(plot.Name()) // gone already once renamed
		}()
	}

	opt := sim.Options{Algorithm: alg, Limit: limit, Store: store, Record: plot != nil}
	sum, err := sim.Run(ctx, opt, trace, name, stdout)
	if rs != nil && sum != nil {
		// After the run's own messages, before the store closes.
		defer func() {
			if err := deleteKeys(ctx, rs, sum.Keys); err != nil {
				fmt.Fprintf(stderr, "sluice simulate: -store redis: %v (they expire when the limit forgets them)\n", err)
			}
		}()
	}
	if err != nil {
		return fail("%v", err)
	}
	if err := sum.Print(stderr); err != nil {
		return fail("%v", err)
	}
	if plot != nil {
		if err := writePlot(plot, *plotPath, sum); err != nil {
			return fail("-plot: %v", err)
		}
	}
	return 0
}

// writePlot draws sum into f, a new file beside path, and renames it to
// path.
func writePlot(f *os.File, path string, sum *sim.Summary) error {
	w := bufio.NewWriter(f)
	if err := sim.Plot(w, sum); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil { // CreateTemp makes it 0600
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// simRedisStore connects to the Redis at addr for one run: decisions use
// the trace's times (not Redis' clock), and the keys get a prefix of their
// own so that runs never see each other's counters. deleteKeys removes them
// after the run.
func simRedisStore(ctx context.Context, addr string, db int, user, password string, tc *tls.Config) (*redisstore.Store, error) {
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	return redisstore.New(ctx, redisstore.Options{
		Addrs:    []string{addr},
		DB:       db,
		Username: user,
		Password: password,
		TLS:      tc,
		Timeout:  time.Second,
		Prefix:   "sluice:simulate:" + hex.EncodeToString(id[:]) + ":",
	})
}

// redisPasswordEnv is the environment variable -store redis reads the
// password from: the one the docs' configs give store.redis.password
// (password: ${REDIS_PASSWORD}), so that it is never on a command line,
// which other users of the machine can read.
const redisPasswordEnv = "REDIS_PASSWORD"

// simRedisHint names the flag or variable to check when Redis refused
// the connection, "" otherwise.
func simRedisHint(err error) string {
	switch {
	case errors.Is(err, redisstore.ErrDB):
		return " (check -redis-db)"
	case errors.Is(err, redisstore.ErrAuth):
		return " (check -redis-username and the environment variable " + redisPasswordEnv + ")"
	}
	if tooOld, _ := redisstore.UsernameTooOld(err); tooOld {
		return " (-redis-username needs Redis 6.0 or later: leave it out, " + redisPasswordEnv + " alone is the default user's password)"
	}
	return simTLSHint(err)
}

// deleteKeys deletes the Redis keys of a run's keys, a batch per command,
// even after ctx is cancelled (an interrupted run cleans up too). Left
// alone, they would expire only when the limit forgets them: weeks after
// the run for a weekly limit.
func deleteKeys(ctx context.Context, s *redisstore.Store, keys []sim.KeyCount) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	c := s.Client()
	const batch = 512
	for len(keys) > 0 {
		n := min(batch, len(keys))
		names := make([]string, n)
		for i, k := range keys[:n] {
			names[i] = s.KeyOf(&sluice.Request{Key: k.Key})
		}
		if err := c.Do(ctx, c.B().Unlink().Key(names...).Build()).Error(); err != nil {
			return fmt.Errorf("delete the run's keys: %w", err)
		}
		keys = keys[n:]
	}
	return nil
}
