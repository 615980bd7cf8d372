// Command instr runs one contender's hot-key decision loop n times, for
// counting instructions per decision under valgrind's callgrind, which is
// deterministic where wall time on a shared machine is not:
//
//	go build -o /tmp/instr ./instr
//	valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//	    --toggle-collect='main.loop*' /tmp/instr -c sluice-token_bucket -n 1000000
//
// instr.sh runs every contender and prints instructions per decision
// (collected instructions ÷ n) and the ratios to x/time/rate.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"golang.org/x/time/rate"
)

var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func main() {
	c := flag.String("c", "sluice-token_bucket", "contender: sluice-ALGORITHM or xtimerate")
	n := flag.Int("n", 1000000, "decisions")
	flag.Parse()
	// One OS thread: callgrind follows the call stack of each thread, so
	// a loop that moved to another thread midway would be counted in part.
	runtime.LockOSThread()
	// The same limit as the hot-key benchmark: 2000 per ms, one request
	// per µs, every request admitted.
	var admitted int
	if *c == "xtimerate" {
		l := rate.NewLimiter(rate.Limit(2e6), 2000)
		admitted = loopXRate(l, *n)
	} else {
		alg, err := sluice.ParseAlgorithm(*c)
		if len(*c) > 7 && (*c)[:7] == "sluice-" {
			alg, err = sluice.ParseAlgorithm((*c)[7:])
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		lim, err := sluice.NewLimiter(memstore.New(memstore.Options{}), alg, sluice.Every(2000, time.Millisecond))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		admitted = loopSluice(lim, *n)
	}
	if admitted != *n {
		fmt.Fprintf(os.Stderr, "%s: admitted %d of %d\n", *c, admitted, *n)
		os.Exit(1)
	}
}

//go:noinline
func loopSluice(lim *sluice.Limiter, n int) int {
	ctx := context.Background()
	admitted := 0
	for i := 0; i < n; i++ {
		d, err := lim.AllowAt(ctx, "hot", base.Add(time.Duration(i)*time.Microsecond), 1)
		if err != nil {
			panic(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	return admitted
}

//go:noinline
func loopXRate(l *rate.Limiter, n int) int {
	admitted := 0
	for i := 0; i < n; i++ {
		if l.AllowN(base.Add(time.Duration(i)*time.Microsecond), 1) {
			admitted++
		}
	}
	return admitted
}
