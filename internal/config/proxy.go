package config

import (
	"net/url"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/proxy"
)

// ProxyConfig is the reverse proxy: requests to Listen go to Upstream.
type ProxyConfig struct {
	Listen   string `yaml:"listen"`   // required, host:port
	Upstream string `yaml:"upstream"` // required, an absolute http or https URL
	// DialTimeout bounds connecting to the upstream. Default
	// proxy.DefaultDialTimeout (5s).
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// ResponseHeaderTimeout bounds the wait for the upstream's response
	// headers once the request is sent. Default
	// proxy.DefaultResponseHeaderTimeout (60s); the body streams without a
	// deadline.
	ResponseHeaderTimeout time.Duration `yaml:"response_header_timeout"`
	// TunnelIdleTimeout closes an upgraded connection (a WebSocket)
	// through which nothing has passed, either way, for that long.
	// Default proxy.DefaultTunnelIdleTimeout (1h).
	TunnelIdleTimeout time.Duration `yaml:"tunnel_idle_timeout"`
	// Listener is the client side: read_header_timeout, idle_timeout,
	// body_read_timeout, max_connections, tls.
	Listener `yaml:",inline"`
}

func (p *ProxyConfig) defaults(file string) {
	setDefault(&p.DialTimeout, proxy.DefaultDialTimeout)
	setDefault(&p.ResponseHeaderTimeout, proxy.DefaultResponseHeaderTimeout)
	setDefault(&p.TunnelIdleTimeout, proxy.DefaultTunnelIdleTimeout)
	p.Listener.defaults(file)
}

func (p *ProxyConfig) check(ck *checker) {
	if p.Listen == "" {
		ck.fail("proxy.listen", "missing: the proxy needs an address to listen on, such as 127.0.0.1:8000")
	} else {
		ck.listen("proxy.listen", p.Listen, false)
	}
	if p.Upstream == "" {
		ck.fail("proxy.upstream", "missing: the proxy needs an upstream URL, such as http://127.0.0.1:9000")
	} else if msg := upstreamProblem(p.Upstream); msg != "" {
		ck.fail("proxy.upstream", "%q: %s", redact(p.Upstream), msg)
	}
	ck.between("proxy.dial_timeout", p.DialTimeout, time.Millisecond, time.Hour)
	ck.between("proxy.response_header_timeout", p.ResponseHeaderTimeout, time.Millisecond, time.Hour)
	ck.between("proxy.tunnel_idle_timeout", p.TunnelIdleTimeout, time.Millisecond, 24*time.Hour)
	p.Listener.check(ck, "proxy")
}

func upstreamProblem(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "not a URL"
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "want an http:// or https:// URL"
	case u.Host == "":
		return "no host"
	case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return "must not have a query or fragment"
	case u.User != nil:
		return "must not carry credentials"
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "port " + strconv.Quote(p) + " is not a number from 1 to 65535"
		}
	}
	return ""
}
