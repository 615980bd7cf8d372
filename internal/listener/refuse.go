package listener

import (
	"bytes"
	"io"
	"net"
	"strconv"
	"time"
)

// AnswerRefused has l answer a connection beyond its cap with an HTTP/1.1
// 503 ({"error":"overloaded"}, Retry-After: 1, as an HTTP/2 request over
// the cap is answered) before closing it, rather than closing it at once;
// and returns l. Set it on a plaintext HTTP listener only (under TLS the
// client would read the answer as a failed handshake, no better than the
// close). A gateway asking the decision API (nginx's auth_request, Caddy's
// forward_auth) takes a closed connection for Sluice down, which its
// fail-open configs let through unlimited: clients that fill the cap with
// requests a delay rule holds would pass every request after them. An
// answer is Sluice's word, which those configs refuse. At most
// maxRefusing connections are being answered at once (each for up to
// refuseWait); beyond that they are closed at once, as before.
func (l *Listener) AnswerRefused() *Listener {
	l.answer = true
	return l
}

const (
	// maxRefusing bounds the refused connections being answered at once.
	maxRefusing = 256
	// refuseWait bounds the time a refused connection is held: to read
	// the request's head (the answer waits for it: Go's transport drops
	// an answer that comes before its request as unsolicited), and to
	// take what else the client sends before the close (closing with
	// unread bytes resets the connection, and the client may lose the
	// answer).
	refuseWait = time.Second
	// refuseHead bounds the head read before answering.
	refuseHead = 16 << 10
)

// overloadedBody is the body of the 503 a request over the cap gets, on
// HTTP/1.1 (overloaded) and HTTP/2 alike.
const overloadedBody = `{"error":"overloaded"}` + "\n"

var overloaded = []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n" +
	"Content-Length: " + strconv.Itoa(len(overloadedBody)) + "\r\nConnection: close\r\n\r\n" + overloadedBody)

// refuse answers c 503 once its request's head has come (or refuseWait
// has passed, or refuseHead bytes), then closes it.
func (l *Listener) refuse(c net.Conn) {
	defer l.refusing.Add(-1)
	defer c.Close()
	c.SetDeadline(time.Now().Add(refuseWait))
	buf := make([]byte, refuseHead)
	for n := 0; n < len(buf) && !bytes.Contains(buf[:n], []byte("\r\n\r\n")); {
		m, err := c.Read(buf[n:])
		n += m
		if err != nil {
			break
		}
	}
	if _, err := c.Write(overloaded); err != nil {
		return
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	io.Copy(io.Discard, io.LimitReader(c, refuseHead))
}
