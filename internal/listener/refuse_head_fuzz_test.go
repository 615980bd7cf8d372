package listener

import (
	"bytes"
	"io"
	"net"
	"testing"
)

// headEnd returns where a request's head in data ends, as net/http reads
// lines: just past the first empty line (a line feed, one carriage return
// before it trimmed) after the request line; -1 when data holds none.
func headEnd(data []byte) int {
	start := 0
	for i, b := range data {
		if b != '\n' {
			continue
		}
		line := bytes.TrimSuffix(data[start:i], []byte("\r"))
		if len(line) == 0 && start > 0 {
			return i + 1
		}
		start = i + 1
	}
	return -1
}

// chunkConn hands out data in reads of the sizes in chunks (cycled),
// counting what it handed out, and fails t on a read once the head's end
// (end, or -1) has been handed out: readHead must stop there.
type chunkConn struct {
	net.Conn
	t      *testing.T
	data   []byte
	chunks []byte
	given  int
	reads  int
	end    int
}

func (c *chunkConn) Read(p []byte) (int, error) {
	if c.end >= 0 && c.given >= c.end {
		c.t.Fatalf("read again after the head's end (%d bytes in, the end at %d)", c.given, c.end)
	}
	if c.given == len(c.data) {
		return 0, io.EOF
	}
	n := len(p)
	if len(c.chunks) > 0 {
		n = min(n, int(c.chunks[c.reads%len(c.chunks)])+1)
	}
	n = copy(p, c.data[c.given:c.given+min(n, len(c.data)-c.given)])
	c.given += n
	c.reads++
	return n, nil
}

// FuzzReadHead: a refused connection's head is read up to its end, a
// blank line in CRLF or bare LF (then not a byte's read more is asked
// for, so the answer goes out at once), or refuseHead bytes, or the
// client's end; however the client's bytes come in reads. A head cut
// short of its end waited out the connection's deadline, which a
// fail-open gateway took for Sluice down.
func FuzzReadHead(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n"), []byte{3, 0, 200}, false)
	f.Add([]byte("GET / HTTP/1.1\nHost: a\n\n"), []byte{}, false)
	f.Add([]byte("GET / HTTP/1.1\r\nCookie: x\r\n\r\nbody"), []byte{0}, false)
	f.Add([]byte("\r\n\r\n"), []byte{1}, false)
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a\r\n\r\r\n"), []byte{0}, false)
	f.Add([]byte("Cookie: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n"), []byte{255}, true)
	f.Fuzz(func(t *testing.T, head, chunks []byte, long bool) {
		data := head
		if long && len(head) > 0 {
			// Past the bound: the read stops at refuseHead.
			data = bytes.Repeat(head, refuseHead/len(head)+2)
		}
		end := headEnd(data)
		if end > refuseHead {
			end = -1
		}
		c := &chunkConn{t: t, data: data, chunks: chunks, end: end}
		readHead(c)
		switch {
		case c.given > refuseHead:
			t.Fatalf("read %d bytes, past the bound of %d", c.given, refuseHead)
		case end >= 0 && c.given < end:
			t.Fatalf("stopped at %d bytes, before the head's end at %d", c.given, end)
		case end < 0 && c.given != min(len(data), refuseHead):
			t.Fatalf("no end in %d bytes: read %d, want all of them up to %d", len(data), c.given, refuseHead)
		}
	})
}
