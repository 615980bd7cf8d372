// Command sluice is the Sluice daemon and its tools: serve, check-config,
// simulate, version. Each subcommand lives in its own file; main only
// dispatches.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"
)

// version is set at build time with -ldflags "-X main.version=…"; left
// "dev", `sluice version` reads the build's module version or commit
// (versionString).
var version = "dev"

const usage = `usage: sluice <command> [flags]

commands:
  serve [-config FILE] [-listen ADDR] [-proxy-listen ADDR] [-grpc-listen ADDR]
                          run the daemon (no -config: a built-in example on the memory store)
  check-config [-listen ADDR] [-proxy-listen ADDR] [-grpc-listen ADDR] FILE
                          validate a config file, with serve's address overrides;
                          exit 1 with one line per problem
  simulate [flags]         replay a trace of requests through an algorithm (see: sluice simulate -h)
  version                  print the version
  help [COMMAND]           this text, or a command's flags
`

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	stop := onSignals(cancel, os.Stderr, os.Exit)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// repeatWindow is how long after the first SIGINT or SIGTERM another one
// still counts as the same request to stop: a terminal's Ctrl-C reaches
// the whole process group, and a wrapper (a shell script, make, an init
// shim such as tini) forwards the same signal again a moment later.
// Tests of the command shorten or lengthen it (TestMain).
var repeatWindow = time.Second

// onSignals calls cancel at the first SIGINT or SIGTERM (a graceful
// shutdown). Another SIGINT or SIGTERM within repeatWindow of the first
// is the same request, told on stderr and otherwise ignored; one after
// that calls exit(1), telling stderr: an operator who signals again does
// not want to wait for shutdown_timeout. The returned func stops acting
// on them; they stay caught (and dropped) until the process exits, so
// that one arriving between the end of a clean shutdown and the exit does
// not kill the process.
func onSignals(cancel func(), stderr io.Writer, exit func(int)) (stop func()) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		var first os.Signal
		select {
		case first = <-sigs:
		case <-done:
			return
		}
		fmt.Fprintf(stderr, "sluice: %s: stopping gracefully (a further SIGINT or SIGTERM after %v exits at once)\n", signalName(first), repeatWindow)
		cancel()
		window := time.NewTimer(repeatWindow)
		defer window.Stop()
		armed := false // the window has passed: another signal forces the exit
		for {
			select {
			case sig := <-sigs:
				if !armed {
					fmt.Fprintf(stderr, "sluice: %s within %v of %s: the same request to stop; the graceful shutdown goes on\n", signalName(sig), repeatWindow, signalName(first))
					continue
				}
				fmt.Fprintf(stderr, "sluice: second signal (%s) during the shutdown: exiting now, without waiting for requests in flight\n", signalName(sig))
				exit(1)
				return
			case <-window.C:
				armed = true
				fmt.Fprintf(stderr, "sluice: still stopping %v after %s: SIGINT or SIGTERM again exits at once, cutting requests in flight\n", repeatWindow, signalName(first))
			case <-done:
				return
			}
		}
	}()
	return func() { close(done) }
}

// signalName is the name operators send a signal by (kill -s TERM).
func signalName(sig os.Signal) string {
	switch sig {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return sig.String()
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stdout, stderr)
	case "check-config":
		return checkConfig(ctx, args[1:], stdout, stderr)
	case "simulate":
		return simulate(ctx, args[1:], stdin, stdout, stderr)
	case "version", "-version", "--version":
		if len(args) > 1 {
			fmt.Fprintf(stderr, "sluice version: unexpected argument %q\n", args[1])
			return 2
		}
		info, _ := debug.ReadBuildInfo()
		fmt.Fprintln(stdout, "sluice", versionString(version, info))
		return 0
	case "help", "-h", "-help", "--help":
		switch {
		case len(args) > 2:
			fmt.Fprintf(stderr, "sluice help: unexpected argument %q\n", args[2])
			return 2
		case len(args) == 2 && args[1] != "version" && args[1] != "help":
			return run(ctx, []string{args[1], "-h"}, stdin, stdout, stderr) // sluice help serve: sluice serve -h
		}
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n\n%s", args[0], usage)
	return 2
}

// versionString is what `sluice version` prints after "sluice ": v when
// the build set it (-ldflags "-X main.version=…"); else the module version
// that `go install …/cmd/sluice@v1.2.3` records in info; else "dev", with
// the commit that a build in a git checkout records (and whether the
// checkout had changes).
func versionString(v string, info *debug.BuildInfo) string {
	if v != "dev" || info == nil {
		return v
	}
	if m := info.Main.Version; m != "" && m != "(devel)" {
		return m
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return v
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if modified == "true" {
		return v + " (" + rev + ", modified)"
	}
	return v + " (" + rev + ")"
}
