package proxy

import (
	"bufio"
	"maps"
	"net/http"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/clientip"
)

// FuzzForwardedValues: a trusted proxy's X-Forwarded-Proto passes as
// "http" or "https" alone, only when it is one of them in any case; an
// X-Forwarded-Host passes only when net/http would read it, as the one
// Host of a request, as exactly that host; an X-Forwarded-Port only when
// it is a port number written as strconv writes it.
func FuzzForwardedValues(f *testing.F) {
	for _, s := range []string{"https", "HTTP", "hTTps", "https, http", "ftp", "", " https", "app.example:8443",
		"[2001:db8::1]:80", "a.example,b.example", "a b", "a/b", "a\r\nX: y", "443", "0443", "65535", "65536", "+80", "0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		switch p := forwardedProto(v); {
		case p == "":
			if strings.EqualFold(v, "http") || strings.EqualFold(v, "https") {
				t.Errorf("forwardedProto(%q) refused it", v)
			}
		case p != "http" && p != "https" || !strings.EqualFold(v, p):
			t.Errorf("forwardedProto(%q) = %q", v, p)
		}
		if validForwardedHost(v) {
			r, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET / HTTP/1.1\r\nHost: " + v + "\r\n\r\n")))
			switch {
			case err != nil:
				t.Errorf("validForwardedHost(%q), but net/http refuses it as a request's Host: %v", v, err)
			case r.Host != v || strings.ContainsAny(v, ", \t"):
				t.Errorf("validForwardedHost(%q), but net/http reads it as the Host %q", v, r.Host)
			}
		}
		n, err := strconv.Atoi(v)
		if want := err == nil && 1 <= n && n <= 65535 && strconv.Itoa(n) == v; validForwardedPort(v) != want {
			t.Errorf("validForwardedPort(%q) = %v, want %v", v, !want, want)
		}
	})
}

// nodeRE is RFC 7239 §6's node as a regular expression (ABNF literals
// match in any case), the addresses checked by netip below.
var nodeRE = regexp.MustCompile(`^(?i)(?:(unknown)|(_[a-z0-9._-]+)|([0-9.]+)|\[([0-9a-f:.]+)\])(?::([0-9]{1,5}|_[a-z0-9._-]+))?$`)

// rfcNode is validNode written from the grammar: the differential oracle.
func rfcNode(s string) bool {
	m := nodeRE.FindStringSubmatch(s)
	if m == nil {
		return false
	}
	if m[3] != "" {
		if a, err := netip.ParseAddr(m[3]); err != nil || !a.Is4() {
			return false
		}
	}
	if m[4] != "" {
		if a, err := netip.ParseAddr(m[4]); err != nil || !a.Is6() {
			return false
		}
	}
	if p := m[5]; p != "" && p[0] != '_' {
		if n, _ := strconv.Atoi(p); n > 65535 {
			return false
		}
	}
	return true
}

// FuzzForwardedElement: of a trusted proxy's Forwarded line, the proxy
// believes a proto and host only from a line that package clientip
// parses as exactly one element, whose values all pass (proto http or
// https in any case, host one Host, for= and by= nodes as the RFC's
// grammar has them), and then exactly that element's; validNode agrees
// with the grammar (rfcNode); and the element the proxy sends upstream
// (appendForwarded) parses back as exactly the client address, host and
// proto it was given, whatever they are, and is believed as it was sent.
func FuzzForwardedElement(f *testing.F) {
	for _, s := range []string{"for=203.0.113.9;proto=https;host=app.example", "proto=https", `PROTO="HTTPS"`,
		`for="[2001:db8::7]:4711";proto=https;host="[2001:db8::1]:8443";ext="x, y"`, "for=unknown;by=_gw1;proto=http",
		`for="_hidden:_p1";proto=https`, " , proto=https ,", "proto=http, proto=https", "proto=https;proto=http",
		`proto=https;host="app.example`, `host="a\"b"`, `host="a\\b"`, "proto=ftp", `for="2001:db8::7"`,
		`for="[fe80::1%eth0]"`, `for="1.2.3.4:65536"`, `for="UNKNOWN:080"`, "for=01.2.3.4", `for="[::ffff:1.2.3.4]"`,
		"proto=https;host=a;b", `host="a,b"`, "", ";", "=", `proto="https"x`} {
		f.Add(s, "app.example:8443", []byte{203, 0, 113, 9})
	}
	f.Add("", "[2001:db8::1]", []byte{0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add("", "", []byte{})
	f.Fuzz(func(t *testing.T, v, host string, ipb []byte) {
		if got, want := validNode(v), rfcNode(v); got != want {
			t.Errorf("validNode(%q) = %v, the grammar says %v", v, got, want)
		}
		proto, h := forwardedElement([]string{v})
		es, err := clientip.ParseForwarded(v)
		// What the grammar reads, package clientip reads alike.
		if rfc, rerr := ParseForwardedRFC(v); rerr == nil {
			if err != nil || len(es) != len(rfc) {
				t.Fatalf("ParseForwarded(%q) = %d elements, %v; by RFC 7239's grammar %v", v, len(es), err, rfc)
			}
			for i := range es {
				if m := elementMap(es[i]); !maps.Equal(m, withoutExtensions(rfc[i])) {
					t.Errorf("ParseForwarded(%q) element %d = %v; by RFC 7239's grammar %v", v, i, m, rfc[i])
				}
			}
		}
		if proto == "" && h == "" {
			if err == nil && len(es) == 1 {
				e := es[0]
				if (e.Proto != "" || e.Host != "") && (e.Proto == "" || forwardedProto(e.Proto) != "") &&
					(e.Host == "" || validForwardedHost(e.Host)) && (e.For == "" || rfcNode(e.For)) && (e.By == "" || rfcNode(e.By)) {
					t.Errorf("forwardedElement(%q) refused the valid element %+v", v, e)
				}
			}
		} else {
			switch {
			case err != nil || len(es) != 1:
				t.Fatalf("forwardedElement(%q) = %q, %q, but it parses as %d elements, %v", v, proto, h, len(es), err)
			case proto != "" && !strings.EqualFold(es[0].Proto, proto) || proto == "" && es[0].Proto != "":
				t.Errorf("forwardedElement(%q): proto %q, want that of %+v", v, proto, es[0])
			case h != es[0].Host || h != "" && !validForwardedHost(h):
				t.Errorf("forwardedElement(%q): host %q, want that of %+v", v, h, es[0])
			case proto != "" && proto != "http" && proto != "https":
				t.Errorf("forwardedElement(%q): proto %q", v, proto)
			case es[0].For != "" && !rfcNode(es[0].For) || es[0].By != "" && !rfcNode(es[0].By):
				t.Errorf("forwardedElement(%q) believed an element with a bad node: %+v", v, es[0])
			}
		}
		// What goes upstream.
		var ip netip.Addr
		switch len(ipb) {
		case 4:
			ip = netip.AddrFrom4([4]byte(ipb))
		case 16:
			ip = netip.AddrFrom16([16]byte(ipb)).Unmap() // as package clientip returns it
		}
		for _, p := range []string{"http", "https"} {
			line := string(appendForwarded(nil, ip, host, p))
			es, err := clientip.ParseForwarded(line)
			if err != nil || len(es) != 1 {
				t.Fatalf("appendForwarded(%v, %q, %s) = %q: %d elements, %v", ip, host, p, line, len(es), err)
			}
			want := clientip.Element{Proto: p}
			// A Host by the grammar, of a uri-host not empty (which RFC 3986
			// allows, ":" or "" alone), and without the , ; = the proxy
			// keeps out of host= (forwardedHost).
			if rfcHost(host) && host != "" && host[0] != ':' && !strings.ContainsAny(host, ",;=") {
				want.Host = host
			}
			if ip.IsValid() {
				want.For = ip.String()
				if ip.Is6() {
					want.For = "[" + want.For + "]"
				}
			}
			if es[0] != want {
				t.Errorf("appendForwarded(%v, %q, %s) = %q, parsed %+v, want %+v", ip, host, p, line, es[0], want)
			}
			if rfc, err := ParseForwardedRFC(line); err != nil || len(rfc) != 1 || !maps.Equal(rfc[0], elementMap(want)) {
				t.Errorf("appendForwarded(%v, %q, %s) = %q: by RFC 7239's grammar %v, %v; want %v", ip, host, p, line, rfc, err, elementMap(want))
			}
			if a, ok := clientip.ParseNode(es[0].For); ip.IsValid() && (!ok || a != ip) {
				t.Errorf("appendForwarded(%v, ...) = %q: for= reads as %v", ip, line, a)
			}
			// A Host that is a list (net/http takes "a,b") goes on as it
			// is, as in X-Forwarded-Host, but is believed of no proxy.
			if proto, h := forwardedElement([]string{line}); !strings.Contains(host, ",") && (proto != p || h != want.Host) {
				t.Errorf("forwardedElement(%q) = %q, %q: the proxy does not believe its own element", line, proto, h)
			}
		}
	})
}

// elementMap is e as ParseForwardedRFC returns an element.
func elementMap(e clientip.Element) map[string]string {
	m := map[string]string{}
	for k, v := range map[string]string{"for": e.For, "by": e.By, "host": e.Host, "proto": e.Proto} {
		if v != "" {
			m[k] = v
		}
	}
	return m
}

// withoutExtensions is m without the parameters package clientip drops,
// and without the empty values it reports as absent.
func withoutExtensions(m map[string]string) map[string]string {
	out := map[string]string{}
	for _, k := range []string{"for", "by", "host", "proto"} {
		if v := m[k]; v != "" {
			out[k] = v
		}
	}
	return out
}
