package logthrottle

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// Each kind of line gets one through per second, with the count of those
// of its kind left out since; a level the logger does not enable writes
// and counts nothing.
func TestNewLogLogger(t *testing.T) {
	var out bytes.Buffer
	level := new(slog.LevelVar)
	level.Set(slog.LevelDebug)
	now := time.Unix(1_700_000_000, 0)
	l := NewLogLogger(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: level})), slog.LevelDebug,
		func() time.Time { return now }, "TLS handshake error")
	lines := func() []string { return strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") }
	for range 5 {
		l.Print("http: TLS handshake error from 127.0.0.1:1234: EOF")
	}
	for range 3 {
		l.Print("http: panic serving 127.0.0.1:1234: boom")
	}
	if got := lines(); len(got) != 2 || !strings.Contains(got[0], "TLS handshake error") || !strings.Contains(got[1], "panic serving") {
		t.Fatalf("5 handshake errors and 3 other lines in one second: %q, want one line of each", got)
	}
	now = now.Add(time.Second)
	l.Print("http: TLS handshake error from 127.0.0.1:1234: EOF")
	l.Print("http: panic serving 127.0.0.1:1234: boom")
	if got := lines(); len(got) != 4 || !strings.Contains(got[2], "level=DEBUG") || !strings.Contains(got[2], "suppressed=4") || !strings.Contains(got[3], "suppressed=2") {
		t.Fatalf("one of each a second later: %q, want 4 lines at DEBUG, the last two with suppressed=4 and suppressed=2", got)
	}
	level.Set(slog.LevelInfo)
	now = now.Add(time.Second)
	for range 3 {
		l.Print("http: TLS handshake error from 127.0.0.1:1234: EOF")
	}
	level.Set(slog.LevelDebug)
	now = now.Add(time.Second)
	l.Print("http: TLS handshake error from 127.0.0.1:1234: EOF")
	if got := lines(); len(got) != 5 || !strings.Contains(got[4], "suppressed=0") {
		t.Fatalf("after 3 lines at level info, one at debug: %q, want 5 lines, the last with suppressed=0", got)
	}
}
