package redisstore_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// BenchmarkSlidingLogScript reports the time inside Redis (INFO
// commandstats) and the commands the sliding log's script runs per
// decision, on one key fed one request per step of the requests' own
// time: admitting with a full period behind (one run expires per
// request), and at 10× the limit (refusing, with RetryAfter searched).
//
//	go test -run '^$' -bench SlidingLogScript -benchtime 20000x ./redisstore/
func BenchmarkSlidingLogScript(b *testing.B) {
	srv := redistest.StartServer(b)
	s := open(b, redisstore.Options{Addrs: []string{srv.Addr}})
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		l    sluice.Limit
		step time.Duration
	}{
		{"admit-expiring", sluice.Every(10_000, time.Second), 100 * time.Microsecond},
		{"overload-10x", sluice.PerSecond(100), time.Millisecond},
	} {
		b.Run(tc.name, func(b *testing.B) {
			key := tc.name + strconv.FormatInt(time.Now().UnixNano(), 10)
			now := time.Unix(1_700_000_000, 0)
			take := func(i int) {
				if _, err := s.Take(ctx, sluice.Request{Key: key, Algorithm: sluice.SlidingWindowLog, Limit: tc.l, Cost: 1, Now: now.Add(time.Duration(i) * tc.step)}); err != nil {
					b.Fatal(err)
				}
			}
			warm := int(tc.l.Period / tc.step) // a full period of history first
			for i := range warm {
				take(i)
			}
			if _, err := redistest.Do(srv.Addr, "CONFIG", "RESETSTAT"); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := range b.N {
				take(warm + i)
			}
			b.StopTimer()
			stats := commandStats(b, srv.Addr)
			n := float64(b.N)
			b.ReportMetric(stats["evalsha"].usec/n, "redis-µs/decision")
			cmds := 0.0
			for name, st := range stats {
				if name != "evalsha" && name != "config|resetstat" {
					cmds += st.calls
				}
			}
			b.ReportMetric(cmds/n, "commands/decision")
			b.ReportMetric(stats["hget"].calls/n, "hget/decision")
		})
	}
}

type cmdStat struct{ calls, usec float64 }

func commandStats(b *testing.B, addr string) map[string]cmdStat {
	info, err := redistest.Do(addr, "INFO", "commandstats")
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]cmdStat{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		var st cmdStat
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			x, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				st.calls = x
			case "usec":
				st.usec = x
			}
		}
		out[name] = st
	}
	return out
}
