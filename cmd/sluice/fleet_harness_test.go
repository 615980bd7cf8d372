package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// The fleet through real processes: three `sluice serve` on one real
// redis-server, each its own process (this test binary re-executed as the
// sluice command: TestMain runs main() when SLUICE_TEST_MAIN=1, so each
// child is `sluice serve -config FILE` with its flags, signals and exit
// codes), driven over HTTP.

// TestMain doubles as the sluice command for the process tests;
// SLUICE_TEST_REPEAT_WINDOW sets the command's repeatWindow.
func TestMain(m *testing.M) {
	if os.Getenv("SLUICE_TEST_MAIN") == "1" {
		if w := os.Getenv("SLUICE_TEST_REPEAT_WINDOW"); w != "" {
			d, err := time.ParseDuration(w)
			if err != nil {
				panic(err)
			}
			repeatWindow = d
		}
		main()
		return
	}
	os.Exit(m.Run())
}

// sluiceProc is one `sluice serve` child process.
type sluiceProc struct {
	cmd         *exec.Cmd
	api         string // http://127.0.0.1:PORT
	proxy, grpc string // with startSluiceProcAll: the proxy's URL, the gRPC listener's address
	logs        *redistest.SyncBuffer
	done        chan struct{} // closed when it has exited
	err         error         // its exit, once done
}

// startSluiceProc runs `sluice serve -config path` as a child process and
// waits for it to print its decision API's address (port 0: a free one).
// The test's cleanup stops it (SIGTERM) and fails if it does not exit 0.
func startSluiceProc(t *testing.T, path string) *sluiceProc {
	t.Helper()
	return startSluiceProcEnv(t, path)
}

// startSluiceProcEnv is startSluiceProc with more environment variables
// (NAME=value) for the process.
func startSluiceProcEnv(t *testing.T, path string, env ...string) *sluiceProc {
	t.Helper()
	return startSluiceProcFor(t, path, false, env)
}

// startSluiceProcAll is startSluiceProc for a config with a proxy and a
// gRPC listener: it also waits for their addresses.
func startSluiceProcAll(t *testing.T, path string) *sluiceProc {
	t.Helper()
	return startSluiceProcFor(t, path, true, nil)
}

// startSluiceProcFor starts the process, waiting for the decision API's
// address, and with all the proxy's and the gRPC listener's too (serve
// prints the three in a row).
func startSluiceProcFor(t *testing.T, path string, all bool, env []string) *sluiceProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "serve", "-config", path)
	cmd.Env = append(append(os.Environ(), "SLUICE_TEST_MAIN=1"), env...)
	p := &sluiceProc{cmd: cmd, logs: new(redistest.SyncBuffer), done: make(chan struct{})}
	cmd.Stderr = p.logs
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		found := false
		var api string
		for sc.Scan() {
			l := sc.Text()
			if m := reAPI.FindStringSubmatch(l); m != nil && api == "" {
				api = m[1]
			}
			if m := reProxy.FindStringSubmatch(l); m != nil && all && p.proxy == "" {
				p.proxy = m[1] // before addr is sent: read after it
			}
			if m := reGRPC.FindStringSubmatch(l); m != nil && all && p.grpc == "" {
				p.grpc = m[1]
			}
			if !found && api != "" && (!all || p.proxy != "" && p.grpc != "") {
				found = true
				addr <- api
			}
		}
		if !found {
			close(addr)
		}
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(30 * time.Second): // a hang guard, not a measurement
				cmd.Process.Kill()
				<-p.done
				t.Errorf("sluice %d: no exit within 30s of SIGTERM", cmd.Process.Pid)
			}
			if p.err != nil {
				t.Errorf("sluice %d: exit after SIGTERM: %v (want 0)", cmd.Process.Pid, p.err)
			}
		}
		if strings.Contains(p.logs.String(), "DATA RACE") || t.Failed() {
			t.Errorf("sluice %d logs:\n%s", cmd.Process.Pid, p.logs.String())
		}
	})
	select {
	case a, ok := <-addr:
		if !ok {
			<-p.done
			t.Fatalf("sluice serve printed no address (exit %v):\n%s", p.err, p.logs.String())
		}
		p.api = a
	case <-time.After(60 * time.Second): // a hang guard
		t.Fatalf("sluice serve: no address within 60s:\n%s", p.logs.String())
	}
	return p
}

// kill SIGKILLs the process and waits for its end.
func (p *sluiceProc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
}

// metrics reads the process's /metrics: each sample line's series (name
// and labels as printed) to its value.
func (p *sluiceProc) metrics(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := fleetClient.Get(p.api + "/metrics")
	if err != nil {
		t.Fatalf("GET %s/metrics: %v", p.api, err)
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if i < 0 || err != nil {
			t.Fatalf("GET %s/metrics: bad line %q", p.api, line)
		}
		m[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

var fleetClient = &http.Client{
	Transport: &http.Transport{MaxIdleConnsPerHost: 64},
	Timeout:   20 * time.Second,
}

// fleetAnswer is a /v1/check answer, with when the client asked and when
// it got the answer.
type fleetAnswer struct {
	Allowed      bool  `json:"allowed"`
	ResetAfterMS int64 `json:"reset_after_ms"`
	sent, got    time.Time
}

// fleetCheck asks api about one request of rule and key. An error is a
// transport error (the process is gone); any answer but 200 fails the test.
func fleetCheck(t *testing.T, api, rule, key string) (fleetAnswer, error) {
	sent := time.Now()
	resp, err := fleetClient.Post(api+"/v1/check", "application/json", strings.NewReader(fmt.Sprintf(`{"rule":%q,"key":%q}`, rule, key)))
	if err != nil {
		return fleetAnswer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fleetAnswer{}, err
	}
	var a fleetAnswer
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &a) != nil {
		t.Errorf("POST %s/v1/check %s: %d %s", api, rule, resp.StatusCode, body)
	}
	a.sent, a.got = sent, time.Now()
	return a, nil
}

// drive sends n requests of rule and key, conc at a time, request i to
// apis[i%len(apis)], and returns how many were admitted.
func drive(t *testing.T, apis []string, rule, key string, n, conc int) int {
	t.Helper()
	var next, admitted atomic.Int64
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				a, err := fleetCheck(t, apis[i%int64(len(apis))], rule, key)
				if err != nil {
					t.Errorf("%s: %v", rule, err)
					return
				}
				if a.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return int(admitted.Load())
}
