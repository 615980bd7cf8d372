package benchutil

import (
	"net"
	"testing"
)

// TestReadAnswer feeds answers through a pipe: a 200 with its body read
// whole, one without a length, one not a 200, and one followed by more
// bytes than it announced.
func TestReadAnswer(t *testing.T) {
	for _, tc := range []struct {
		answer string
		ok     bool
	}{
		{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", true},
		{"HTTP/1.1 200 OK\r\nX-A: b\r\n\r\n", true},
		{"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 0\r\n\r\n", false},
		{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhello", false},
	} {
		c, s := net.Pipe()
		go func() {
			s.Write([]byte(tc.answer))
			s.Close()
		}()
		answer, ok := ReadAnswer(c, make([]byte, 4096))
		c.Close()
		if ok != tc.ok || ok && string(answer) != tc.answer {
			t.Errorf("ReadAnswer(%q) = %q, %v; want ok %v", tc.answer, answer, ok, tc.ok)
		}
	}
	if cpu := CPUTime(); cpu <= 0 {
		t.Errorf("CPUTime() = %v, want the time this test has used", cpu)
	}
}
