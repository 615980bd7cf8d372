package redisstore

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"testing"

	"github.com/sluicehq/sluice/internal/rawio"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// echoLine serves one connection of ln: it reads a line and writes it back.
func echoLine(t *testing.T, ln net.Listener) {
	t.Helper()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		line, err := bufio.NewReader(c).ReadString('\n')
		if err == nil {
			c.Write([]byte(line))
		}
	}()
}

func roundTrip(t *testing.T, c net.Conn) {
	t.Helper()
	if _, err := c.Write([]byte("PING\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "PING\n" {
		t.Fatalf("read %q, %v; want PING", line, err)
	}
}

func TestDialPlainIsRaw(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	echoLine(t, ln)
	c, err := dial(context.Background(), ln.Addr().String(), &net.Dialer{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*rawio.Conn); !ok {
		t.Fatalf("dial returned %T, want *rawio.Conn", c)
	}
	roundTrip(t, c)
}

// TLS goes over the raw connection, the server's name taken from the
// address (the certificate is for 127.0.0.1), as rueidis' own dial does.
func TestDialTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "redis-ca")
	srv := ca.Server(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{srv.TLS}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	echoLine(t, ln)
	cfg := ca.ClientConfig()
	cfg.ServerName = ""
	c, err := dial(context.Background(), ln.Addr().String(), &net.Dialer{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc, ok := c.(*tls.Conn)
	if !ok {
		t.Fatalf("dial returned %T, want *tls.Conn", c)
	}
	if _, ok := tc.NetConn().(*rawio.Conn); !ok {
		t.Fatalf("TLS over %T, want *rawio.Conn", tc.NetConn())
	}
	if cfg.ServerName != "" {
		t.Fatal("dial changed the caller's TLS config")
	}
	roundTrip(t, c)

	// A certificate the client does not trust fails the dial.
	other := tlstest.NewCA(t, "other-ca")
	ln2, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{other.Server(t).TLS}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln2.Close()
	go func() {
		if c, err := ln2.Accept(); err == nil {
			c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	if c, err := dial(context.Background(), ln2.Addr().String(), &net.Dialer{}, cfg); err == nil {
		c.Close()
		t.Fatal("dial trusted a certificate of another CA")
	}
}
