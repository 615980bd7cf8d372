package proxy

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"reflect"
	"testing"
)

// FuzzSimpleResponse: whatever readSimpleResponse takes, http.ReadResponse
// reads as the same response: status, headers, length, close, body (but
// for a Connection header that says close, which http.ReadResponse
// deletes and readSimpleResponse keeps, so that what it names is
// dropped).
func FuzzSimpleResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nConnection: close\r\nX-A: 1\r\nx-a: 2\r\n\r\n",
		"HTTP/1.1 200\r\nContent-Length: 3\r\n\r\nabcdef",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
		"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\nok\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	get := &http.Request{Method: http.MethodGet}
	f.Fuzz(func(t *testing.T, b []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(b), 4<<10)
		// Storage left over from an earlier answer, as on a pooled
		// connection: none of it may show.
		resp := &http.Response{StatusCode: 599, ContentLength: 7, Close: true, Trailer: http.Header{"X-T": {"t"}}}
		h := http.Header{"X-Earlier": {"1"}, "Content-Length": {"7"}}
		strs := []string{"earlier", "values"}
		ok, err := readSimpleResponse(br, resp, h, &strs)
		if err != nil || !ok {
			return
		}
		body, berr := io.ReadAll(&lenBody{br: br, n: resp.ContentLength})
		want, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), get)
		if err != nil {
			t.Fatalf("%q taken; http.ReadResponse refuses it: %v", b, err)
		}
		wbody, werr := io.ReadAll(want.Body)
		got := resp.Header
		if want.Close {
			if _, ok := got["Connection"]; !ok {
				t.Fatalf("%q: taken without its Connection header", b)
			}
			got = got.Clone()
			delete(got, "Connection")
		}
		if resp.StatusCode != want.StatusCode || resp.ContentLength != want.ContentLength || resp.Close != want.Close ||
			!reflect.DeepEqual(got, want.Header) || len(want.Trailer) > 0 || len(want.TransferEncoding) > 0 {
			t.Fatalf("%q:\ntaken as %d %v cl=%d close=%v\nnet/http %d %v cl=%d close=%v trailer=%v te=%v", b,
				resp.StatusCode, resp.Header, resp.ContentLength, resp.Close,
				want.StatusCode, want.Header, want.ContentLength, want.Close, want.Trailer, want.TransferEncoding)
		}
		if !bytes.Equal(body, wbody) || (berr == nil) != (werr == nil) {
			t.Fatalf("%q: body %q (%v); net/http %q (%v)", b, body, berr, wbody, werr)
		}
	})
}
