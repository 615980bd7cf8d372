package proxy

import (
	"bufio"
	"bytes"
	"net/http"
	"net/textproto"
	"reflect"
	"strings"
	"testing"
)

// FuzzHeadNames: of a stream of response heads that http.ReadResponse
// reads (1xx answers, then the final one), headNames finds, for each
// head, the names its Connection header names, whether the stream comes
// in one piece or in two, split anywhere; and none after the final head.
func FuzzHeadNames(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nConnection: close, X-Foo\r\nX-Foo: 1\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 103 Early Hints\r\nConnection: X-Hint\r\nLink: <a>\r\n\r\nHTTP/1.1 200 OK\r\nconnection: close\r\nCONNECTION: X-B\r\n\r\nConnection: X-Body",
		"HTTP/1.1 200 OK\nConnection: close,\n\tX-Folded\nContent-Length: 0\n\n",
		"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\nHTTP/1.1 200 OK\r\nConnection: X-No\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\nConnectio: X-Not\r\nConnections: X-Not\r\n\r\n",
	} {
		f.Add([]byte(s), uint16(7))
	}
	req := &http.Request{Method: http.MethodGet}
	f.Fuzz(func(t *testing.T, b []byte, split uint16) {
		// The heads net/http reads, one by one; then their Connection
		// lines as textproto reads them (ReadResponse deletes one that
		// says close).
		heads := 0
		br := bufio.NewReader(bytes.NewReader(b))
		for {
			resp, err := http.ReadResponse(br, req)
			if err != nil {
				return // not a stream net/http reads: nothing to compare
			}
			heads++
			if c := resp.StatusCode; c < 100 || c > 199 || c == http.StatusSwitchingProtocols {
				break // a final answer, as the Transport and the fast path read it
			}
		}
		var want [][]string
		tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(b)))
		for range heads {
			if _, err := tp.ReadLine(); err != nil {
				t.Fatal(err)
			}
			h, err := tp.ReadMIMEHeader()
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, fields(h["Connection"]))
		}
		for _, pieces := range [][][]byte{{b}, {b[:int(split)%(len(b)+1)], b[int(split)%(len(b)+1):]}} {
			var n headNames
			n.start()
			for _, p := range pieces {
				n.feed(p)
			}
			var got [][]string
			for _, h := range n.heads {
				got = append(got, fields(h.conn))
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%q in %d pieces: Connection names %q, want %q", b, len(pieces), got, want)
			}
		}
	})
}

// fields is the list the Connection values vv name, in lower case.
func fields(vv []string) []string {
	out := []string{}
	for _, v := range vv {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.Trim(f, " \t"); f != "" {
				out = append(out, strings.ToLower(f))
			}
		}
	}
	return out
}
