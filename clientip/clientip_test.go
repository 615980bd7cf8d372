package clientip

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// req builds a request from remote with headers given as "Name: value".
func req(remote string, headers ...string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remote
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		r.Header.Add(k, v)
	}
	return r
}

func TestClientIP(t *testing.T) {
	trusted := Resolver{Trusted: prefixes("10.0.0.0/8", "fd00::/8", "192.168.1.7/32")}
	tests := []struct {
		name string
		r    Resolver
		req  *http.Request
		want string // "" for the zero Addr
	}{
		{"no proxies: connection address", Resolver{}, req("203.0.113.5:1234"), "203.0.113.5"},
		{"no proxies: XFF ignored", Resolver{}, req("203.0.113.5:1234", "X-Forwarded-For: 1.2.3.4"), "203.0.113.5"},
		{"untrusted peer spoofs XFF", trusted, req("203.0.113.5:1234", "X-Forwarded-For: 10.0.0.9, 1.2.3.4"), "203.0.113.5"},
		{"untrusted peer spoofs Forwarded", trusted, req("203.0.113.5:1234", "Forwarded: for=1.2.3.4"), "203.0.113.5"},
		{"IPv6 peer", trusted, req("[2001:db8::5]:443"), "2001:db8::5"},
		{"IPv4-mapped peer", trusted, req("[::ffff:203.0.113.5]:443"), "203.0.113.5"},
		{"zone dropped", Resolver{}, req("[fe80::1%eth0]:443"), "fe80::1"},
		{"unix socket", trusted, req("@"), ""},
		{"bare address", Resolver{}, req("203.0.113.5"), "203.0.113.5"},

		{"trusted peer, one hop", trusted, req("10.0.0.1:5555", "X-Forwarded-For: 198.51.100.7"), "198.51.100.7"},
		{"rightmost untrusted wins", trusted, req("10.0.0.1:5555", "X-Forwarded-For: 6.6.6.6, 198.51.100.7"), "198.51.100.7"},
		{"spoofed left part skipped", trusted, req("10.0.0.1:5555", "X-Forwarded-For: 10.0.0.50, 198.51.100.7, 10.1.1.1"), "198.51.100.7"},
		{"trusted hops skipped", trusted, req("10.0.0.1:5555", "X-Forwarded-For: 198.51.100.7, 192.168.1.7, 10.2.3.4"), "198.51.100.7"},
		{"all hops trusted: leftmost", trusted, req("10.0.0.1:5555", "X-Forwarded-For: 10.9.9.9, 10.8.8.8"), "10.9.9.9"},
		{"several XFF lines are one list", trusted, req("10.0.0.1:5555", "X-Forwarded-For: 6.6.6.6", "X-Forwarded-For: 198.51.100.7, 10.0.0.2"), "198.51.100.7"},
		{"later XFF line nearer", trusted, req("10.0.0.1:5555", "X-Forwarded-For: 198.51.100.7", "X-Forwarded-For: 10.0.0.2"), "198.51.100.7"},
		{"XFF with port", trusted, req("10.0.0.1:5555", "X-Forwarded-For: 198.51.100.7:4711"), "198.51.100.7"},
		{"XFF bracketed IPv6 with port", trusted, req("10.0.0.1:5555", "X-Forwarded-For: [2001:db8::7]:4711"), "2001:db8::7"},
		{"XFF bare IPv6", trusted, req("10.0.0.1:5555", "X-Forwarded-For: 2001:db8::7"), "2001:db8::7"},
		{"XFF mapped", trusted, req("10.0.0.1:5555", "X-Forwarded-For: ::ffff:198.51.100.7"), "198.51.100.7"},
		{"XFF empty items and spaces", trusted, req("10.0.0.1:5555", "X-Forwarded-For: ,  198.51.100.7 ,, "), "198.51.100.7"},
		{"XFF garbage at the right: the peer", trusted, req("10.0.0.1:5555", "X-Forwarded-For: 198.51.100.7, garbage"), "10.0.0.1"},
		{"XFF garbage behind a trusted hop", trusted, req("10.0.0.1:5555", "X-Forwarded-For: garbage, 10.0.0.3"), "10.0.0.3"},
		{"XFF garbage left of the client is never read", trusted, req("10.0.0.1:5555", "X-Forwarded-For: garbage, 198.51.100.7"), "198.51.100.7"},
		{"XFF empty header: the peer", trusted, req("10.0.0.1:5555", "X-Forwarded-For: "), "10.0.0.1"},
		{"trusted IPv6 peer", trusted, req("[fd00::1]:80", "X-Forwarded-For: 198.51.100.7"), "198.51.100.7"},
		{"no header from trusted peer", trusted, req("10.0.0.1:5555"), "10.0.0.1"},
		{"XFF preferred over Forwarded", trusted, req("10.0.0.1:5555", "X-Forwarded-For: 198.51.100.7", "Forwarded: for=198.51.100.8"), "198.51.100.7"},

		{"Forwarded for", trusted, req("10.0.0.1:5555", "Forwarded: for=198.51.100.8;proto=https"), "198.51.100.8"},
		{"Forwarded quoted IPv6 with port", trusted, req("10.0.0.1:5555", `Forwarded: for="[2001:db8:cafe::17]:4711"`), "2001:db8:cafe::17"},
		{"Forwarded case-insensitive name", trusted, req("10.0.0.1:5555", "Forwarded: For=198.51.100.8"), "198.51.100.8"},
		{"Forwarded rightmost untrusted", trusted, req("10.0.0.1:5555", "Forwarded: for=6.6.6.6, for=198.51.100.8;by=10.0.0.1, for=10.0.0.4"), "198.51.100.8"},
		{"Forwarded several lines", trusted, req("10.0.0.1:5555", "Forwarded: for=6.6.6.6", "Forwarded: for=198.51.100.8"), "198.51.100.8"},
		{"Forwarded unknown: nearest known", trusted, req("10.0.0.1:5555", "Forwarded: for=198.51.100.8, for=unknown, for=10.0.0.4"), "10.0.0.4"},
		{"Forwarded obfuscated: nearest known", trusted, req("10.0.0.1:5555", "Forwarded: for=_hidden"), "10.0.0.1"},
		{"Forwarded without for: nearest known", trusted, req("10.0.0.1:5555", "Forwarded: proto=https"), "10.0.0.1"},
		{"Forwarded malformed line: nearest known", trusted, req("10.0.0.1:5555", `Forwarded: for="198.51.100.8`), "10.0.0.1"},
		{"Forwarded malformed left line never read", trusted, req("10.0.0.1:5555", `Forwarded: for="6.6.6.6`, "Forwarded: for=198.51.100.8"), "198.51.100.8"},
		// RFC 7239 lets a proxy append its element to the client's line
		// after a comma: a quote the client left open must not swallow it.
		{"Forwarded joined line: client's open quote", trusted, req("10.0.0.1:5555", `Forwarded: for="6.6.6.6, for=198.51.100.8`), "198.51.100.8"},
		{"Forwarded joined line: client's stray quote", trusted, req("10.0.0.1:5555", `Forwarded: for=6.6.6.6", for=198.51.100.8`), "198.51.100.8"},
		{"Forwarded joined line: client's trailing backslash", trusted, req("10.0.0.1:5555", `Forwarded: for="6.6.6.6\, for=198.51.100.8`), "198.51.100.8"},
		{"Forwarded escaped quotes and commas are one element", trusted, req("10.0.0.1:5555", `Forwarded: for="\", for=198.51.100.9, \"", for=10.0.0.4`), "10.0.0.4"},
		{"Forwarded escaped backslash ends the string", trusted, req("10.0.0.1:5555", `Forwarded: for="x\\", for=198.51.100.8`), "198.51.100.8"},
		{"Forwarded open quote in the nearest element", trusted, req("10.0.0.1:5555", `Forwarded: for=198.51.100.8, for="10.0.0.4`), "10.0.0.1"},
		{"Forwarded obfuscated port", trusted, req("10.0.0.1:5555", `Forwarded: for="198.51.100.8:_port"`), "198.51.100.8"},
		{"Forwarded unbracketed IPv6 with port rejected", trusted, req("10.0.0.1:5555", `Forwarded: for="2001:db8::1:80:x"`), "10.0.0.1"},
	}
	for _, tt := range tests {
		got := tt.r.ClientIP(tt.req)
		var want netip.Addr
		if tt.want != "" {
			want = netip.MustParseAddr(tt.want)
		}
		if got != want {
			t.Errorf("%s: ClientIP(RemoteAddr %q, %v) = %v, want %v", tt.name, tt.req.RemoteAddr, tt.req.Header, got, want)
		}
	}
}

func TestParseNode(t *testing.T) {
	tests := []struct {
		in   string
		want string // "" for not ok
	}{
		{"192.0.2.1", "192.0.2.1"},
		{"192.0.2.1:80", "192.0.2.1"},
		{"192.0.2.1:_p", "192.0.2.1"},
		{"192.0.2.1:99999", ""},
		{"192.0.2.1:", ""},
		{"192.0.2.1:8a", ""},
		{"[2001:db8::1]", "2001:db8::1"},
		{"[2001:db8::1]:443", "2001:db8::1"},
		{"[2001:db8::1]x", ""},
		{"[192.0.2.1]", ""},
		{"[2001:db8::1", ""},
		{"2001:db8::1", "2001:db8::1"},
		{"::ffff:192.0.2.1", "192.0.2.1"},
		{"unknown", ""},
		{"_hidden", ""},
		{"", ""},
		{"example.com", ""},
		{"example.com:80", ""},
	}
	for _, tt := range tests {
		got, ok := ParseNode(tt.in)
		if (tt.want == "") == ok || (ok && got != netip.MustParseAddr(tt.want)) {
			t.Errorf("ParseNode(%q) = %v, %v; want %q", tt.in, got, ok, tt.want)
		}
	}
}

func TestParseForwarded(t *testing.T) {
	tests := []struct {
		in      string
		want    []Element
		wantErr bool
	}{
		{"for=192.0.2.60;proto=http;by=203.0.113.43", []Element{{For: "192.0.2.60", Proto: "http", By: "203.0.113.43"}}, false},
		{`for="_gazonk"`, []Element{{For: "_gazonk"}}, false},
		{`For="[2001:db8:cafe::17]:4711"`, []Element{{For: "[2001:db8:cafe::17]:4711"}}, false},
		{"for=192.0.2.43, for=198.51.100.17", []Element{{For: "192.0.2.43"}, {For: "198.51.100.17"}}, false},
		{`for=unknown ; host="example.com:8080" , , for=a`, []Element{{For: "unknown", Host: "example.com:8080"}, {For: "a"}}, false},
		{`for="a\"b\\c"`, []Element{{For: `a"b\c`}}, false},
		{`for="a,b";by=x`, []Element{{For: "a,b", By: "x"}}, false},
		{"for=1;;by=2;", []Element{{For: "1", By: "2"}}, false},
		{"secret=x;for=1", []Element{{For: "1"}}, false}, // extensions dropped
		{"", nil, false},
		{"for=1;for=2", nil, true},
		{"for", nil, true},
		{"=1", nil, true},
		{"for=[::1]", nil, true}, // brackets need quotes
		{`for="1`, nil, true},
		{`for="a"b`, nil, true},
		{"for=1 by=2", nil, true},
		{"for=\"a\x01\"", nil, true},
	}
	for _, tt := range tests {
		got, err := ParseForwarded(tt.in)
		if (err != nil) != tt.wantErr || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseForwarded(%q) = %+v, %v; want %+v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseForwarded(%q) error %v does not wrap ErrMalformed", tt.in, err)
		}
	}
}

// FuzzParseForwarded checks that ParseForwarded never panics and that what
// it parses formats (Element.String) and parses back to the same elements.
func FuzzParseForwarded(f *testing.F) {
	for _, s := range []string{
		"for=192.0.2.60;proto=http;by=203.0.113.43",
		`for="[2001:db8:cafe::17]:4711"`,
		"for=192.0.2.43, for=198.51.100.17",
		`for=unknown ; host="example.com:8080" , , for=_hidden`,
		`for="a\"b\\c";by="x,y"`,
		`for="1`, "for=1;for=2", "secret=x;;for=1;",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		elems, err := ParseForwarded(v)
		if err != nil {
			return
		}
		parts := make([]string, 0, len(elems))
		for _, e := range elems {
			if s := e.String(); s != "" {
				parts = append(parts, s)
			}
		}
		again, err := ParseForwarded(strings.Join(parts, ", "))
		if err != nil {
			t.Fatalf("ParseForwarded(%q) = %+v, but its formatting %q fails: %v", v, elems, strings.Join(parts, ", "), err)
		}
		var nonEmpty []Element
		for _, e := range elems {
			if e != (Element{}) {
				nonEmpty = append(nonEmpty, e)
			}
		}
		if !reflect.DeepEqual(again, nonEmpty) {
			t.Fatalf("ParseForwarded(%q) = %+v; formatted and parsed again: %+v", v, nonEmpty, again)
		}
		// The Resolver splits from the right (lastComma): on a line that
		// parses, into the same elements.
		fromLeft, _ := splitElements(v)
		var fromRight []string
		for s := v; ; {
			j, ok := lastComma(s)
			if !ok {
				t.Fatalf("ParseForwarded(%q) succeeds, but split from the right %q is unterminated", v, s)
			}
			fromRight = append([]string{s[j+1:]}, fromRight...)
			if j < 0 {
				break
			}
			s = s[:j]
		}
		if !reflect.DeepEqual(fromRight, fromLeft) {
			t.Fatalf("%q split from the left: %q; from the right: %q", v, fromLeft, fromRight)
		}
	})
}

// FuzzClientIP checks, for any X-Forwarded-For and Forwarded values, that an
// untrusted peer's headers change nothing, that behind a trusted peer
// the answer is never the zero Addr, and that whatever a client wrote, the
// element a trusted proxy appends after a comma is read.
func FuzzClientIP(f *testing.F) {
	f.Add("198.51.100.7, 10.0.0.2", `for="[2001:db8::1]:80"`)
	f.Add("garbage, 10.0.0.3", "for=unknown")
	f.Add("", `for="x`)
	r := Resolver{Trusted: prefixes("10.0.0.0/8", "fd00::/8")}
	f.Fuzz(func(t *testing.T, xff, fwd string) {
		h := http.Header{}
		if xff != "" {
			h.Set("X-Forwarded-For", xff)
		}
		if fwd != "" {
			h.Set("Forwarded", fwd)
		}
		untrusted := &http.Request{RemoteAddr: "203.0.113.5:1", Header: h}
		if got := r.ClientIP(untrusted); got != netip.MustParseAddr("203.0.113.5") {
			t.Fatalf("untrusted peer with XFF %q Forwarded %q: ClientIP = %v", xff, fwd, got)
		}
		behind := &http.Request{RemoteAddr: "10.0.0.1:1", Header: h}
		if got := r.ClientIP(behind); !got.IsValid() || got.Zone() != "" || got.Is4In6() {
			t.Fatalf("trusted peer with XFF %q Forwarded %q: ClientIP = %v, want a plain valid address", xff, fwd, got)
		}
		appended := &http.Request{RemoteAddr: "10.0.0.1:1", Header: http.Header{"Forwarded": {fwd + ", for=198.51.100.8"}}}
		if got := r.ClientIP(appended); got != netip.MustParseAddr("198.51.100.8") {
			t.Fatalf("trusted peer with Forwarded %q: ClientIP = %v, want the appended 198.51.100.8", appended.Header["Forwarded"][0], got)
		}
		appended = &http.Request{RemoteAddr: "10.0.0.1:1", Header: http.Header{"X-Forwarded-For": {xff + ", 198.51.100.7"}}}
		if got := r.ClientIP(appended); got != netip.MustParseAddr("198.51.100.7") {
			t.Fatalf("trusted peer with X-Forwarded-For %q: ClientIP = %v, want the appended 198.51.100.7", appended.Header["X-Forwarded-For"][0], got)
		}
		// A Unix-socket peer: nothing believed unless TrustUnix; then
		// the same walk, never an address with a zone (UnixClient's mark).
		if got := r.ClientIP(&http.Request{RemoteAddr: "@", Header: h}); got.IsValid() {
			t.Fatalf("untrusted Unix peer with XFF %q Forwarded %q: ClientIP = %v, want none", xff, fwd, got)
		}
		ru := r
		ru.TrustUnix = true
		if got := ru.ClientIP(&http.Request{RemoteAddr: "@", Header: h}); got.Zone() != "" || got.Is4In6() {
			t.Fatalf("trusted Unix peer with XFF %q Forwarded %q: ClientIP = %v, want a plain address or none", xff, fwd, got)
		}
		appended.RemoteAddr = "@"
		if got := ru.ClientIP(appended); got != netip.MustParseAddr("198.51.100.7") {
			t.Fatalf("trusted Unix peer with X-Forwarded-For %q: ClientIP = %v, want the appended 198.51.100.7", appended.Header["X-Forwarded-For"][0], got)
		}
	})
}

func BenchmarkClientIP(b *testing.B) {
	r := Resolver{Trusted: prefixes("10.0.0.0/8", "172.16.0.0/12")}
	request := req("10.0.0.1:5555", "X-Forwarded-For: 6.6.6.6, 198.51.100.7, 172.16.0.9")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if r.ClientIP(request) != netip.MustParseAddr("198.51.100.7") {
				b.Fatal("wrong address")
			}
		}
	})
}

func ExampleResolver_ClientIP() {
	r := Resolver{Trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}

	// A request relayed by a trusted load balancer at 10.0.0.1.
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "10.0.0.1:41000"
	req.Header.Set("X-Forwarded-For", "1.2.3.4, 198.51.100.7")
	fmt.Println(r.ClientIP(req))

	// The same header sent straight from a client is not believed.
	req.RemoteAddr = "203.0.113.9:52000"
	fmt.Println(r.ClientIP(req))
	// Output:
	// 198.51.100.7
	// 203.0.113.9
}

// A trusted prefix written in IPv4-mapped IPv6 form (::ffff:10.0.0.0/104,
// as a dual-stack listener shows a peer: [::ffff:10.0.0.7]:port) trusts
// the IPv4 addresses it maps, as addresses are compared unmapped; an IPv6
// prefix that merely contains the mapped range (::/0) trusts no IPv4
// address.
func TestTrustedMappedPrefix(t *testing.T) {
	mapped := Resolver{Trusted: prefixes("::ffff:10.0.0.0/104", "::ffff:192.168.1.7/128")}
	tests := []struct {
		name string
		r    Resolver
		req  *http.Request
		want string
	}{
		{"IPv4 peer in a mapped prefix", mapped, req("10.0.0.1:5555", "X-Forwarded-For: 198.51.100.7"), "198.51.100.7"},
		{"mapped peer in a mapped prefix", mapped, req("[::ffff:10.0.0.1]:5555", "X-Forwarded-For: 198.51.100.7"), "198.51.100.7"},
		{"mapped single address", mapped, req("192.168.1.7:5555", "X-Forwarded-For: 198.51.100.7"), "198.51.100.7"},
		{"trusted hops in a mapped prefix skipped", mapped, req("10.0.0.1:5555", "X-Forwarded-For: 198.51.100.7, 10.2.3.4"), "198.51.100.7"},
		{"Forwarded through a mapped prefix", mapped, req("10.0.0.1:5555", "Forwarded: for=198.51.100.8"), "198.51.100.8"},
		{"outside the mapped prefix", mapped, req("11.0.0.1:5555", "X-Forwarded-For: 198.51.100.7"), "11.0.0.1"},
		{"::/0 trusts no IPv4 peer", Resolver{Trusted: prefixes("::/0")}, req("10.0.0.1:5555", "X-Forwarded-For: 198.51.100.7"), "10.0.0.1"},
	}
	for _, tt := range tests {
		if got := tt.r.ClientIP(tt.req); got != netip.MustParseAddr(tt.want) {
			t.Errorf("%s: ClientIP(RemoteAddr %q, %v) with trusted %v = %v, want %v", tt.name, tt.req.RemoteAddr, tt.req.Header, tt.r.Trusted, got, tt.want)
		}
	}
}

// Trusts answers for the connection's peer alone, whatever the request's
// headers say, in either form of an IPv4 prefix.
func TestTrusts(t *testing.T) {
	r := Resolver{Trusted: prefixes("10.0.0.0/8", "::ffff:192.168.0.0/112", "2001:db8::/32")}
	for _, c := range []struct {
		remote string
		want   bool
	}{
		{"10.1.2.3:5000", true},
		{"[::ffff:10.1.2.3]:5000", true},
		{"192.168.4.5:80", true},
		{"[2001:db8::7]:443", true},
		{"203.0.113.9:5000", false},
		{"[2001:db9::7]:443", false},
		{"@", false}, // a Unix socket
	} {
		if got := r.Trusts(req(c.remote, "X-Forwarded-For: 10.0.0.1")); got != c.want {
			t.Errorf("Trusts(%s) = %v, want %v", c.remote, got, c.want)
		}
	}
	if (Resolver{}).Trusts(req("10.1.2.3:5000")) {
		t.Error("the zero Resolver trusts a peer")
	}
}
