package redistest

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Through an Older, INFO tells the version given, and nothing else
// changes.
func TestOlder(t *testing.T) {
	s := StartServer(t)
	x := NewOlder(t, s.Addr, "6.0.16")
	direct, err := Do(s.Addr, "INFO", "server")
	if err != nil {
		t.Fatal(err)
	}
	through, err := Do(x.Addr, "INFO", "server")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(through, "redis_version:6.0.16\r\n") || strings.Contains(direct, "redis_version:6.0.16") {
		t.Errorf("INFO through the relay does not tell 6.0.16:\n%s", through)
	}
	id := func(info string) string {
		_, v, _ := strings.Cut(info, "run_id:")
		v, _, _ = strings.Cut(v, "\r\n")
		return v
	}
	if id(direct) == "" || id(through) != id(direct) {
		t.Errorf("run_id through the relay %q, direct %q; want the same", id(through), id(direct))
	}
	if got, err := Do(x.Addr, "ECHO", "redis_version:7.0.1"); err != nil || got != "redis_version:7.0.1" {
		t.Errorf("ECHO of a start of the version's line = %q, %v; want it whole", got, err)
	}
}

// A version's line split between two of Redis's writes is rewritten too,
// and a read that ends with what could start it is held only until the
// next.
func TestOlderSplit(t *testing.T) {
	x := &Older{from: []byte("redis_version:7.0.15"), to: []byte("redis_version:6.0.16")}
	c, client := net.Pipe()
	s, server := net.Pipe()
	go func() { x.back(c, s, nil); c.Close() }()
	go func() {
		for _, w := range []string{"$40\r\n# Server\r\nredis_vers", "ion:7.0.15\r\nrun_id:abc\r\n", "+redis_vers", "ion\r\n"} {
			server.Write([]byte(w))
		}
		server.Close()
	}()
	got, err := io.ReadAll(client)
	if err != nil {
		t.Fatal(err)
	}
	if want := "$40\r\n# Server\r\nredis_version:6.0.16\r\nrun_id:abc\r\n+redis_version\r\n"; string(got) != want {
		t.Errorf("through the relay: %q; want %q", got, want)
	}
}

// Through an Older of a version before 6.0, HELLO is an unknown command
// and AUTH with a username has the wrong number of arguments, in Redis
// 5's words and before a password is asked for, in their turn among
// pipelined commands; AUTH with the password alone, and the rest, reach
// Redis, AUTH's refusals in Redis 5's words.
func TestOlderBefore6(t *testing.T) {
	s := StartServer(t)
	x := NewOlder(t, s.Addr, "5.0.14") // reads INFO: before the password
	if _, err := Do(s.Addr, "CONFIG", "SET", "requirepass", "pw"); err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", x.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	var w strings.Builder
	for _, cmd := range [][]string{
		{"HELLO", "3", "AUTH", "u", "pw"},
		{"AUTH", "u", "pw"},
		{"PING"},
		{"AUTH", "nope"},
		{"AUTH", "pw"},
		{"hello", "2"},
		{"ECHO", "after"},
		{"INFO", "server"},
	} {
		w.WriteString("*" + strconv.Itoa(len(cmd)) + "\r\n")
		for _, a := range cmd {
			w.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
		}
	}
	if _, err := io.WriteString(conn, w.String()); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	for i, want := range []string{
		"error: ERR unknown command `HELLO`, with args beginning with: `3`, `AUTH`, `u`, `pw`, ",
		"error: ERR wrong number of arguments for 'auth' command",
		"error: NOAUTH Authentication required.",
		"error: ERR invalid password",
		"OK",
		"error: ERR unknown command `hello`, with args beginning with: `2`, ",
		"after",
		"redis_version:5.0.14",
	} {
		got, err := readReply(r)
		if err != nil {
			got = "error: " + err.Error()
		}
		if !strings.Contains(got, want) {
			t.Errorf("reply %d: %q; want %q", i, got, want)
		}
	}
	if _, err := DoAuth(s.Addr, "", "pw", "CONFIG", "SET", "requirepass", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := Do(x.Addr, "AUTH", "pw"); err == nil || err.Error() != "ERR Client sent AUTH, but no password is set" {
		t.Errorf("AUTH of a password without requirepass: %v; want Redis 5's refusal", err)
	}
}
