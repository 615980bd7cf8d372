package redistest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Older is a TCP relay between a client and Redis that makes Redis look
// older: in what Redis sends back, its INFO's "redis_version:REAL" reads
// "redis_version:VERSION". HELLO's reply still tells the real version: a
// client that reads INFO server to learn the version sees VERSION, for
// tests of what it does on an older server that is not installed here.
//
// A VERSION before 6.0 also answers what Redis 5 (and 4) lack as they
// do: HELLO is an unknown command ("ERR unknown command `HELLO`, with
// args beginning with: `3`, …"), and AUTH takes the password alone (AUTH
// with a username: "ERR wrong number of arguments for 'auth' command"),
// both before any password is asked for, as there; and AUTH's refusals
// of a password are in Redis 5's words ("ERR invalid password" for
// Redis's WRONGPASS, "ERR Client sent AUTH, but no password is set" for
// a password Redis has none for). Every other command reaches Redis as it
// was sent.
type Older struct {
	relay // Addr: where clients connect, 127.0.0.1:PORT

	from, to []byte
	// swaps are Redis's replies that Redis 5 words otherwise, and its
	// words (pre6 only).
	swaps [][2][]byte
	// pre6: VERSION is before 6.0. marker is Redis's reply to
	// markerCommand, which stands in for a command Older answers itself
	// (see forward).
	pre6   bool
	marker []byte
}

// markerCommand is what Older sends Redis instead of a command it
// answers itself: a command no Redis has, which Redis answers with an
// error before it asks for a password, in its turn among the client's
// commands; Older puts its own answer in place of that error.
const markerCommand = "REDISTEST-OLDER-ANSWERS"

// NewOlder relays to the Redis at addr until the test ends, making it
// tell version. The real version is read from Redis; version must be as
// long (the reply's lengths stay right), such as "6.0.16" or "5.0.14" for
// 7.0.15.
func NewOlder(tb testing.TB, addr, version string) *Older {
	tb.Helper()
	info, err := Do(addr, "INFO", "server")
	if err != nil {
		tb.Fatal(err)
	}
	var real string
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, "redis_version:"); ok {
			real = strings.TrimSpace(v)
		}
	}
	if real == "" || len(real) != len(version) {
		tb.Fatalf("redistest: NewOlder: Redis at %s runs %q; %q must be as long", addr, real, version)
	}
	major, _, _ := strings.Cut(version, ".")
	n, err := strconv.Atoi(major)
	if err != nil {
		tb.Fatalf("redistest: NewOlder: version %q is not MAJOR.MINOR.PATCH", version)
	}
	x := &Older{from: []byte("redis_version:" + real), to: []byte("redis_version:" + version), pre6: n < 6}
	if x.pre6 {
		_, err := Do(addr, markerCommand)
		if err == nil {
			tb.Fatalf("redistest: NewOlder: Redis at %s runs %s", addr, markerCommand)
		}
		x.marker = []byte("-" + err.Error() + "\r\n")
		x.swaps = pre6Swaps
	}
	x.start(tb, addr, nil, func(c, s net.Conn) {
		if !x.pre6 {
			x.wg.Go(func() { io.Copy(s, c); s.Close() })
			x.wg.Go(func() { x.back(c, s, nil); c.Close() })
			return
		}
		answers := &answers{}
		x.wg.Go(func() { x.forward(c, s, answers); s.Close() })
		x.wg.Go(func() { x.back(c, s, answers); c.Close() })
	})
	return x
}

// pre6Swaps are AUTH's refusals of a password as Redis 7 words them, and
// as Redis 5.0 does (its authCommand).
var pre6Swaps = [][2][]byte{
	{[]byte("-WRONGPASS invalid username-password pair or user is disabled.\r\n"), []byte("-ERR invalid password\r\n")},
	{[]byte("-ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?\r\n"),
		[]byte("-ERR Client sent AUTH, but no password is set\r\n")},
}

// answers are the replies Older owes a client in place of Redis's
// replies to markerCommand, in order.
type answers struct {
	mu   sync.Mutex
	owed [][]byte
}

func (a *answers) push(b []byte) { a.mu.Lock(); a.owed = append(a.owed, b); a.mu.Unlock() }

func (a *answers) pop() []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.owed) == 0 {
		return nil
	}
	b := a.owed[0]
	a.owed = a.owed[1:]
	return b
}

// answer is Redis 5's reply to the command args, where it differs from
// a newer Redis's, else nil.
func answer(args []string) []byte {
	switch {
	case len(args) == 0:
		return nil
	case strings.EqualFold(args[0], "HELLO"):
		// processCommand of Redis 5.0: each argument quoted, the whole
		// cut near 128 bytes.
		var b strings.Builder
		for _, a := range args[1:] {
			if b.Len() >= 128 {
				break
			}
			fmt.Fprintf(&b, "`%s`, ", a[:min(len(a), 128-b.Len())])
		}
		msg := fmt.Sprintf("unknown command `%s`, with args beginning with: %s", args[0], b.String())
		msg = strings.NewReplacer("\r", " ", "\n", " ").Replace(msg)
		return []byte("-ERR " + msg + "\r\n")
	case strings.EqualFold(args[0], "AUTH") && len(args) != 2:
		return []byte("-ERR wrong number of arguments for 'auth' command\r\n")
	}
	return nil
}

// forward passes the client's commands on to Redis, but for one Redis 5
// answers otherwise (answer): it sends markerCommand in its place and
// owes the client that answer.
func (x *Older) forward(c, s net.Conn, owed *answers) {
	r := bufio.NewReader(c)
	w := bufio.NewWriter(s)
	for {
		raw, args, err := readCommand(r)
		if err != nil {
			return
		}
		if a := answer(args); a != nil {
			owed.push(a)
			raw = fmt.Appendf(nil, "*1\r\n$%d\r\n%s\r\n", len(markerCommand), markerCommand)
		}
		if _, err := w.Write(raw); err != nil {
			return
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}

// readCommand reads one command of a client: its bytes as sent and, for
// a RESP array of bulk strings, its arguments (an inline command, a line
// of text, has none).
func readCommand(r *bufio.Reader) (raw []byte, args []string, err error) {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return nil, nil, err
	}
	raw = line
	if line[0] != '*' {
		return raw, nil, nil
	}
	n, err := strconv.Atoi(string(bytes.TrimRight(line[1:], "\r\n")))
	if err != nil {
		return nil, nil, fmt.Errorf("redistest: command header %q", line)
	}
	for range n {
		head, err := r.ReadBytes('\n')
		if err != nil {
			return nil, nil, err
		}
		size, err := strconv.Atoi(string(bytes.TrimRight(head[1:], "\r\n")))
		if err != nil || head[0] != '$' || size < 0 {
			return nil, nil, fmt.Errorf("redistest: argument header %q", head)
		}
		arg := make([]byte, size+2)
		if _, err := io.ReadFull(r, arg); err != nil {
			return nil, nil, err
		}
		raw = append(append(raw, head...), arg...)
		args = append(args, string(arg[:size]))
	}
	return raw, args, nil
}

// back passes Redis's replies on, rewritten: the version, each reply to
// markerCommand replaced by the next answer owed (owed nil: none), and
// the swaps. A read that ends with the start of any of them keeps that
// start until the next read completes it: a reply ends with "\r\n", never with such a start,
// so nothing a client waits for is kept.
func (x *Older) back(c, s net.Conn, owed *answers) {
	buf := make([]byte, 64<<10)
	var kept []byte
	for {
		n, err := s.Read(buf)
		if err != nil {
			if len(kept) > 0 {
				c.Write(kept)
			}
			return
		}
		out := bytes.ReplaceAll(append(kept, buf[:n]...), x.from, x.to)
		if owed != nil {
			out = replaceEach(out, x.marker, owed.pop)
		}
		starts := [][]byte{x.from}
		if owed != nil {
			starts = append(starts, x.marker)
		}
		for _, sw := range x.swaps {
			out = bytes.ReplaceAll(out, sw[0], sw[1])
			starts = append(starts, sw[0])
		}
		kept = nil
	tail:
		for i := max(0, len(out)-longest(starts)+1); i < len(out); i++ {
			for _, p := range starts {
				if bytes.HasPrefix(p, out[i:]) {
					kept = bytes.Clone(out[i:])
					out = out[:i]
					break tail
				}
			}
		}
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

// longest is the length of the longest of ps.
func longest(ps [][]byte) int {
	n := 0
	for _, p := range ps {
		n = max(n, len(p))
	}
	return n
}

// replaceEach returns b with each old replaced by what next returns (old
// itself when next returns nil).
func replaceEach(b, old []byte, next func() []byte) []byte {
	i := bytes.Index(b, old)
	if i < 0 {
		return b
	}
	var out []byte
	for i >= 0 {
		repl := next()
		if repl == nil {
			repl = old
		}
		out = append(append(out, b[:i]...), repl...)
		b = b[i+len(old):]
		i = bytes.Index(b, old)
	}
	return append(out, b...)
}
