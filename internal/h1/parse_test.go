package h1

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// reused is the request headOf parses into, released before each parse
// as a connection releases it between requests: what one head leaves in
// it must not show in the next (FuzzParse compares each with net/http).
var (
	reused    request
	reusedLen int
)

// headOf runs readHead and parse over b as the front does, with bodies
// up to maxBody.
func headOf(b []byte, maxBody int64) (p parsed, n int, ok bool) {
	br := bufio.NewReaderSize(bytes.NewReader(b), maxHead)
	head, handoff, _, err := readHead(br)
	if err != nil || handoff {
		return p, 0, false
	}
	reused.release(reusedLen)
	p, ok = parse(head, &reused, maxBody)
	reusedLen = p.lines
	return p, len(head), ok
}

func TestParseSubset(t *testing.T) {
	fast := []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"HEAD /a/b?c=d HTTP/1.1\r\nHost: example.com:8080\r\nAccept: */*\r\nX-A: 1\r\nx-a: 2\r\n\r\n",
		"GET /x HTTP/1.0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: [::1]:80\r\nConnection: close\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 1.2.3.4\r\nv:\r\n\r\n",
	}
	for _, s := range fast {
		for _, max := range []int64{0, 64} {
			if _, _, ok := headOf([]byte(s), max); !ok {
				t.Errorf("%q (bodies up to %d): handed off; want the fast front", s, max)
			}
		}
	}
	handedOff := []string{
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx",
		"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nPragma: no-cache\r\n\r\n",
		"GET / HTTP/1.1\r\n\r\n",                       // no Host
		"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", // two
		"GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
		"GET / HTTP/1.1\nHost: x\n\n",                     // bare LF
		"GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n", // folded
		"GET / HTTP/1.1\r\nHost: x\r\nX : a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n\r\n",
		"GET http://x/ HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET * HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET / HTTP/2.0\r\nHost: x\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"get / HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET  / HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nX: " + strings.Repeat("a", maxHead) + "\r\n\r\n",
	}
	for _, s := range handedOff {
		for _, max := range []int64{0, 64} {
			if s == handedOff[0] && max > 0 {
				continue // a POST with a small body: the next test's
			}
			if _, _, ok := headOf([]byte(s), max); ok {
				t.Errorf("%q (bodies up to %d): taken by the fast front; want it handed off", s, max)
			}
		}
	}
}

// With bodies allowed, a POST with at most one Content-Length of digits
// within the bound is taken; any other framing is handed off.
func TestParseBodies(t *testing.T) {
	const max = 64
	fast := map[string]int64{
		"POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc": 3,
		"POST / HTTP/1.1\r\nHost: x\r\n\r\n":                                 0, // no body
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n":            0,
		"POST / HTTP/1.0\r\nContent-Length: 2\r\n\r\nab":                     2,
		"POST / HTTP/1.1\r\nHost: x\r\ncontent-length:\t007 \r\n\r\n1234567": 7,
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 64\r\n\r\n":           max,
	}
	for s, n := range fast {
		p, _, ok := headOf([]byte(s), max)
		if !ok || p.length != n || p.method != http.MethodPost {
			t.Errorf("%q: ok %v length %d method %q; want the fast front, length %d", s, ok, p.length, p.method, n)
		}
		if _, _, ok := headOf([]byte(s), 0); ok {
			t.Errorf("%q: taken without bodies allowed", s)
		}
	}
	for _, s := range []string{
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 65\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3, 3\r\n\r\nabc",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +3\r\n\r\nabc",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0x3\r\n\r\nabc",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", // no Host
		"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
		"HEAD / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
		"PUT / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
		"POST * HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length : 3\r\n\r\nabc",
		"POST / HTTP/1.1\r\nHost: x\r\n Content-Length: 3\r\n\r\nabc", // folded onto Host
	} {
		if _, _, ok := headOf([]byte(s), max); ok {
			t.Errorf("%q: taken by the fast front; want it handed off", s)
		}
	}
}

// FuzzParse: whatever the fast parser accepts, net/http's server accepts
// too, as the same request: method, target, URL, protocol, Host, headers
// and whether the connection closes after it. (What it refuses goes to
// net/http itself, so refusing is always safe.)
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"HEAD /a/b?c=d%20e HTTP/1.1\r\nHost: example.com:8080\r\nAccept: */*\r\nX-A: 1\r\nx-a: 2\r\n\r\n",
		"GET /x HTTP/1.0\r\n\r\n",
		"GET /;a=b//c/../d?%zz HTTP/1.1\r\nHost: [::1]:80\r\nConnection: close, foo\r\nFoo: \t bar \t\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n",
		"GET / HTTP/1.1\r\nhost: x\r\ncontent-type: a\xffb\r\n\r\n",
		"GET /a? HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /a??b=c#d HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /a!b'(c)*d~e@f:g=h HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET //x/y HTTP/1.1\r\nHost: x\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\nF: 6\r\nG: 7\r\nH: 8\r\nI: 9\r\n\r\n",
		"POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 26\r\n\r\n{\"rule\":\"bench\",\"key\":\"k\"}",
		"POST / HTTP/1.0\r\ncontent-length: 007\r\n\r\n1234567GET / HTTP/1.1\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, n, ok := headOf(b, 0)
		if ok && p.length != 0 {
			t.Fatalf("%q: a body of %d taken with bodies off", b, p.length)
		}
		if !ok {
			// With bodies: whatever the front takes (its body whole
			// after the head, as the server requires), net/http reads
			// as the same request with the same body.
			if p, n, ok = headOf(b, 64); !ok || int64(len(b)-n) < p.length {
				return
			}
		}
		whole := b[:n+int(p.length)]
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(whole)))
		if err != nil {
			t.Fatalf("fast front accepted %q; net/http refuses it: %v", b[:n], err)
		}
		// What net/http's server checks after ReadRequest.
		// (ReadRequest refuses two Hosts and drops Host from the map.)
		if r.ProtoAtLeast(1, 1) && r.Host == "" || r.Host != "" && !httpguts.ValidHostHeader(r.Host) {
			t.Fatalf("fast front accepted %q; net/http's server refuses its Host %q", b[:n], r.Host)
		}
		for k, vv := range r.Header {
			if !httpguts.ValidHeaderFieldName(k) {
				t.Fatalf("fast front accepted %q; net/http's server refuses header name %q", b[:n], k)
			}
			for _, v := range vv {
				if !httpguts.ValidHeaderFieldValue(v) {
					t.Fatalf("fast front accepted %q; net/http's server refuses value %q", b[:n], v)
				}
			}
		}
		if r.ContentLength != p.length || (p.length == 0) != (r.Body == http.NoBody) || len(r.TransferEncoding) > 0 {
			t.Fatalf("fast front accepted %q with a body of %d; net/http sees (%d, %v)", b, p.length, r.ContentLength, r.TransferEncoding)
		}
		if p.method != r.Method || p.target != r.RequestURI || p.minor != r.ProtoMinor || r.ProtoMajor != 1 ||
			p.host != r.Host || p.close != r.Close || *p.url != *r.URL {
			t.Fatalf("%q: fast front %q %q 1.%d host %q close %v url %#v; net/http %q %q %d.%d host %q close %v url %#v",
				b[:n], p.method, p.target, p.minor, p.host, p.close, p.url, r.Method, r.RequestURI, r.ProtoMajor, r.ProtoMinor, r.Host, r.Close, r.URL)
		}
		if len(p.header) != len(r.Header) || len(r.Header) > 0 && !reflect.DeepEqual(p.header, r.Header) {
			t.Fatalf("%q: fast front headers %q; net/http %q", b[:n], p.header, r.Header)
		}
		if got, err := io.ReadAll(r.Body); err != nil || !bytes.Equal(got, whole[n:]) {
			t.Fatalf("%q: fast front body %q; net/http %q, %v", whole, whole[n:], got, err)
		}
	})
}
