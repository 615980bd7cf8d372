package proxy

import (
	"bytes"
	"io"
	"net/http"
)

// heldBodyMax bounds what readAhead reads of a body before the request is
// held (action delay).
const heldBodyMax = 16 << 10

// readAhead reads r's body, up to heldBodyMax, before a rule may hold r
// (action delay), and returns r with a body that gives the same bytes.
//
// Why: net/http's HTTP/1 server notices a client that goes away (and
// cancels the request's context) only once the request's body has been
// read to its end: before that, what is on the connection is body, which
// it must not read on its own. The proxy reads the body only when it
// forwards the request, so a client that sent a body and left while its
// request was held was not noticed, and the request went to the upstream
// when the wait was over. Read first, the body's end starts that watch.
// A larger body (or one announced with Expect: 100-continue, which would
// be asked for before the decision) is left as it was: such a request is
// noticed gone only when it is forwarded. On the h1 front (no bodies) and
// on HTTP/2 (which notices a reset at once) there is nothing to do.
func readAhead(r *http.Request) *http.Request {
	if r.ProtoMajor != 1 || r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 ||
		r.ContentLength > heldBodyMax || len(r.Header["Expect"]) > 0 {
		return r
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, heldBodyMax+1))
	var rest io.Reader = r.Body // more than heldBodyMax: the rest as it comes
	switch {
	case err != nil:
		rest = errReader{err} // as forwarding would have met it
	case len(b) <= heldBodyMax:
		rest = eofReader{}
	}
	r2 := *r
	r2.Body = &aheadBody{Reader: io.MultiReader(bytes.NewReader(b), rest), c: r.Body}
	return &r2
}

type aheadBody struct {
	io.Reader
	c io.Closer
}

func (b *aheadBody) Close() error { return b.c.Close() }

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }
