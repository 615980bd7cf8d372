package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/daemon"
	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/rules"
)

const checkConfigUsage = `usage: sluice check-config [-listen ADDR] [-proxy-listen ADDR] [-grpc-listen ADDR] FILE

Validates a config file: prints "FILE: ok" and a summary and exits 0, or
prints one line per problem, FILE:LINE: KEY: MSG, on standard error and
exits 1. -listen, -proxy-listen and -grpc-listen override the config's
addresses as they do for serve, and are checked as serve checks them.
`

// checkConfig runs `sluice check-config FILE`. Exit status: 0 valid, 1
// invalid (one line per problem on stderr) or interrupted (ctx done: a
// SIGINT or SIGTERM), 2 usage error.
func checkConfig(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check-config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var over config.Overrides
	overrideFlags(fs, &over)
	fs.Usage = func() { fmt.Fprint(stderr, checkConfigUsage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 {
		if fs.NArg() == 0 {
			fmt.Fprintln(stderr, "sluice check-config: no FILE to check")
		} else {
			fmt.Fprintf(stderr, "sluice check-config: unexpected argument %q\n", fs.Arg(1))
		}
		fs.Usage()
		return 2
	}
	file := fs.Arg(0)
	// The check reads files that may never end (/dev/stdin, a pipe whose
	// writer is still there) and does not stop for ctx: stop waiting for
	// it at once, its output dropped, rather than at a second signal.
	type result struct {
		code           int
		stdout, stderr bytes.Buffer
	}
	done := make(chan *result, 1)
	go func() {
		r := new(result)
		r.code = check(file, over, &r.stdout, &r.stderr)
		done <- r
	}()
	select {
	case r := <-done:
		io.Copy(stdout, &r.stdout)
		io.Copy(stderr, &r.stderr)
		return r.code
	case <-ctx.Done():
		fmt.Fprintf(stderr, "sluice check-config: interrupted before %s was checked\n", file)
		return 1
	}
}

// check checks the config file named file, with over applied, as
// checkConfig describes.
func check(file string, over config.Overrides, stdout, stderr io.Writer) int {
	cfg, err := config.Load(file)
	errs := []error{err}
	var descs *descriptors.Set
	if err == nil {
		// Every check serve makes of a parsed config, each run whatever
		// the others found, so that one run lists all the problems: the
		// overrides of the listen addresses (applied first, as serve
		// does: the checks below see its addresses), what serve would
		// refuse to start with, the certificates, keys and CAs that do
		// not load, and the Envoy descriptor files, if any.
		errs = []error{overridden(file, over.Apply(cfg))}
		descs, err = daemon.LoadDescriptors(cfg)
		errs = append(errs, config.Unsupported(cfg), cfg.TLSProblems(), err)
	}
	failed := false
	for _, err := range errs {
		if err == nil {
			continue
		}
		failed = true
		var problems config.Errors
		if errors.As(err, &problems) {
			for _, p := range problems {
				fmt.Fprintln(stderr, p)
			}
		} else {
			fmt.Fprintf(stderr, "%s: %v\n", file, err)
		}
	}
	if failed {
		return 1
	}
	for _, w := range cfg.TLSWarnings(time.Now()) {
		fmt.Fprintln(stderr, w) // valid, as serve starts with it, but clients will refuse it
	}
	for _, w := range cfg.UnixWarnings() {
		fmt.Fprintln(stderr, w) // valid, but an ip key counts the socket's clients as one
	}
	for _, w := range daemon.NotRead(descs) {
		fmt.Fprintln(stderr, w) // valid, but a domain may be lost
	}
	sum := summary(cfg) // ends in "; grpc ADDR" with a grpc block
	if cfg.GRPC != nil && cfg.GRPC.XDS != nil {
		sum += fmt.Sprintf(" (descriptors from the xDS server %s, node %s)", cfg.GRPC.XDS.Server, cfg.GRPC.XDS.NodeID)
	} else if descs != nil {
		shadow := ""
		if cfg.GRPC.ShadowMode {
			shadow = "; shadow mode: no limit denies"
		}
		sum += fmt.Sprintf(" (%s, %s, %s%s)", count(len(descs.Files()), "descriptor file"), count(descs.Domains(), "domain"), count(descs.Rules(), "limit"), shadow)
	}
	fmt.Fprintf(stdout, "%s: ok: %s\n", file, sum)
	return 0
}

// overridden returns err, Overrides.Apply's of the config file named
// file, one line per problem, as config.Errors (each printed FILE: MSG):
// nil for nil.
func overridden(file string, err error) error {
	if err == nil {
		return nil
	}
	var es config.Errors
	for _, line := range strings.Split(err.Error(), "\n") {
		es = append(es, &rules.ParseError{File: file, Msg: line})
	}
	return es
}

// count writes n and noun, in the plural unless n is 1: "1 domain", "2 domains".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// summary describes a valid config in one line.
func summary(c *config.Config) string {
	var b strings.Builder
	names := make([]string, len(c.Rules))
	for i, r := range c.Rules {
		names[i] = r.Name
	}
	switch len(names) {
	case 0:
		b.WriteString("no rules")
	case 1:
		fmt.Fprintf(&b, "1 rule (%s)", names[0])
	default:
		fmt.Fprintf(&b, "%d rules (%s)", len(names), strings.Join(names, ", "))
	}
	fmt.Fprintf(&b, "; store %s", c.Store.Type)
	if c.Store.Type == "redis" {
		r := &c.Store.Redis
		mode := "single"
		switch {
		case r.Cluster:
			mode = "cluster"
		case r.Sentinel != "":
			mode = "sentinel " + r.Sentinel
		}
		if r.DB != 0 {
			mode += fmt.Sprintf(", db %d", r.DB)
		}
		fmt.Fprintf(&b, " (%s, %s, on_error %s)", strings.Join(r.Addrs, ","), mode, c.Store.OnError)
	}
	fmt.Fprintf(&b, "; api %s", c.Listen)
	if c.Proxy != nil {
		fmt.Fprintf(&b, "; proxy %s -> %s", c.Proxy.Listen, c.Proxy.Upstream)
	}
	if c.GRPC != nil {
		fmt.Fprintf(&b, "; grpc %s", c.GRPC.Listen)
	}
	return b.String()
}
