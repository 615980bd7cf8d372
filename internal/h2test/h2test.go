// Package h2test speaks raw HTTP/2 to a TLS server, for tests that need
// frames no well-behaved client sends: a request's HEADERS exactly as
// given (pseudo-headers of an extended CONNECT, RFC 8441), and streams
// opened and reset at once by the thousand (rapid reset, CVE-2023-44487).
package h2test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// safety bounds every read and write of a Conn: a hang guard, not a
// measure.
const safety = time.Minute

// Conn is a client's HTTP/2 connection over TLS, past the prefaces.
type Conn struct {
	tc *tls.Conn
	bw *bufio.Writer
	fr *http2.Framer
	// Settings are the server's first SETTINGS.
	Settings map[http2.SettingID]uint32
}

// Dial connects to addr with cfg (ALPN h2), sends the client preface and
// empty SETTINGS, and reads the server's SETTINGS (acknowledged). The
// connection closes when t ends.
func Dial(t testing.TB, addr string, cfg *tls.Config) *Conn {
	t.Helper()
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"}
	tc, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close() })
	tc.SetDeadline(time.Now().Add(safety))
	if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN: %q, want h2", p)
	}
	c := &Conn{tc: tc, bw: bufio.NewWriter(tc), Settings: map[http2.SettingID]uint32{}}
	c.fr = http2.NewFramer(c.bw, tc)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.bw.WriteString(http2.ClientPreface)
	if err := c.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	c.flush(t)
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the server's SETTINGS: %v", err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			sf.ForeachSetting(func(s http2.Setting) error { c.Settings[s.ID] = s.Val; return nil })
			if err := c.fr.WriteSettingsAck(); err != nil {
				t.Fatal(err)
			}
			c.flush(t)
			return c
		}
	}
}

func (c *Conn) flush(t testing.TB) {
	t.Helper()
	if err := c.bw.Flush(); err != nil {
		t.Fatal(err)
	}
}

// block encodes fields (name, value pairs, in order) as a header block.
func block(fields []string) []byte {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for i := 0; i+1 < len(fields); i += 2 {
		enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return buf.Bytes()
}

// Answer is what came back on a stream: a status, headers and body, or a
// reset.
type Answer struct {
	Status string
	Header http.Header
	Body   string
	RST    bool
	Reset  http2.ErrCode
}

// Request sends one request's HEADERS (fields: pseudo-headers first, in
// order) on stream id, ending the stream if end, and reads the stream's
// answer. A GOAWAY or a read error fails t.
func (c *Conn) Request(t testing.TB, id uint32, end bool, fields ...string) Answer {
	t.Helper()
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block(fields), EndHeaders: true, EndStream: end}); err != nil {
		t.Fatal(err)
	}
	c.flush(t)
	var a Answer
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatalf("stream %d: reading the answer: %v", id, err)
		}
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			t.Fatalf("stream %d: GOAWAY %v", id, ga.ErrCode)
		}
		if f.Header().StreamID != id {
			continue
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			a.RST, a.Reset = true, f.ErrCode
			return a
		case *http2.MetaHeadersFrame:
			a.Status = f.PseudoValue("status")
			a.Header = http.Header{}
			for _, hf := range f.RegularFields() {
				a.Header.Add(hf.Name, hf.Value)
			}
			if f.StreamEnded() {
				return a
			}
		case *http2.DataFrame:
			a.Body += string(f.Data())
			if f.StreamEnded() {
				return a
			}
		}
	}
}

// Flood is how a rapid reset ended.
type Flood struct {
	// Sent is how many streams were opened and reset before a write
	// failed (all n when none did).
	Sent int
	// Served: the server answered a PING sent after all n streams, so it
	// read them all and still serves the connection.
	Served bool
	// GoAway is the server's GOAWAY, if it sent one; Err the read error
	// that ended the connection (io.EOF, a reset), if it ended.
	GoAway *http2.GoAwayFrame
	Err    error
}

// RapidReset opens n streams, each with fields' HEADERS (ending the
// stream if end) and at once a RST_STREAM (CANCEL), as fast as the
// connection takes them, then sends a PING and reads until its ACK or
// the end of the connection. The streams start at stream ID first (odd,
// above any used before). Answers the server sends meanwhile are read
// and dropped.
func (c *Conn) RapidReset(t testing.TB, first uint32, n int, end bool, fields ...string) Flood {
	t.Helper()
	var fl Flood
	read := make(chan struct{})
	go func() {
		defer close(read)
		for {
			f, err := c.fr.ReadFrame()
			if err != nil {
				fl.Err = err
				return
			}
			switch f := f.(type) {
			case *http2.GoAwayFrame:
				fl.GoAway = f
			case *http2.PingFrame:
				if f.IsAck() {
					fl.Served = true
					return
				}
			}
		}
	}()
	hb := block(fields)
	id := first
	var err error
	for fl.Sent = 0; fl.Sent < n; fl.Sent++ {
		if err = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb, EndHeaders: true, EndStream: end}); err != nil {
			break
		}
		if err = c.fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
			break
		}
		if fl.Sent%64 == 63 {
			if err = c.bw.Flush(); err != nil {
				break
			}
		}
		id += 2
	}
	if err == nil {
		if err = c.fr.WritePing(false, [8]byte{'s', 'l', 'u', 'i', 'c', 'e'}); err == nil {
			err = c.bw.Flush()
		}
	}
	if err != nil {
		// The server closed the connection: the reader sees it too (or
		// the PING's ACK that came before).
		c.tc.SetReadDeadline(time.Now().Add(safety))
	}
	<-read
	if !fl.Served && fl.Err == nil {
		fl.Err = errors.New("h2test: the reader stopped without a PING ACK or an error")
	}
	return fl
}
