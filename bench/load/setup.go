package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/sluicehq/sluice/bench/internal/harness"
)

// startNginx runs nginx as one process (master_process off: one worker,
// its CPU in one /proc/PID/stat) proxying addr to upstream over pooled
// HTTP/1.1 connections, with a limit_req zone keyed by client address on
// every request that never limits: nginx's equivalent of the Sluice rule.
func startNginx(ctx context.Context, procs *harness.Procs, dir, addr, upstream string) (*harness.Proc, error) {
	return procs.StartNginx(ctx, dir, `limit_req_zone $binary_remote_addr zone=bench:10m rate=1000000r/s;
upstream up { server `+upstream+`; keepalive 256; }
server {
    listen `+addr+`;
    location / {
        limit_req zone=bench burst=1000000 nodelay;
        proxy_pass http://up;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header X-Forwarded-For $remote_addr;
    }
}
`)
}

// startCaddy runs Caddy's reverse_proxy from addr to upstream. Caddy has
// no rate limiting of its own (it needs a third-party module), so its row
// is proxying alone.
func startCaddy(ctx context.Context, procs *harness.Procs, dir, addr, upstream string) (*harness.Proc, error) {
	conf := "{\n\tadmin off\n\tauto_https off\n}\nhttp://" + addr + " {\n\treverse_proxy " + upstream + "\n}\n"
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	p := &harness.Proc{Name: "caddy", Logs: new(bytes.Buffer), Cmd: exec.CommandContext(ctx, "caddy", "run", "--config", path, "--adapter", "caddyfile")}
	p.Cmd.Stdout, p.Cmd.Stderr = p.Logs, p.Logs
	p.Cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir, "HOME="+dir)
	if err := p.Cmd.Start(); err != nil {
		return nil, fmt.Errorf("start caddy: %w", err)
	}
	procs.Add(p)
	return p, nil
}

// sluiceConfig is a config with one rule that applies to every request but
// never limits (so every request does a full decision and is forwarded),
// and a named rule for /v1/check.
func sluiceConfig(api, proxy, upstream, redis string) []byte {
	store := "  type: memory\n"
	if redis != "" {
		// A generous timeout: this measures throughput, not the fallback.
		store = fmt.Sprintf("  type: redis\n  redis:\n    addrs: [%s]\n    timeout: 1s\n", redis)
	}
	return fmt.Appendf(nil, `listen: %s
proxy:
  listen: %s
  upstream: http://%s
store:
%s  on_error: deny
rules:
  - name: bench
    key: [ip]
    rate: 100000000/s
    algorithm: token_bucket
    action: reject
`, api, proxy, upstream, store)
}
