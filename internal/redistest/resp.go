package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// Do sends one command to the Redis at addr over a fresh connection and
// returns the reply as text (bulk and simple strings, integers; arrays are
// joined with newlines). A Redis error reply is returned as an error. It is
// meant for test setup and inspection, not for load.
func Do(addr string, args ...string) (string, error) {
	return DoAuth(addr, "", "", args...)
}

// DoAuth is Do on a connection that first authenticates (AUTH) with
// password pass, as user when it is not "" (no AUTH when pass is "").
func DoAuth(addr, user, pass string, args ...string) (string, error) {
	var first []string
	if pass != "" {
		first = []string{"AUTH", pass}
		if user != "" {
			first = []string{"AUTH", user, pass}
		}
	}
	return doAfter(addr, first, "AUTH", args)
}

// DoIn is Do in database db: the connection first SELECTs it, so that
// a test sees the keys a store with that database number wrote.
func DoIn(addr string, db int, args ...string) (string, error) {
	return doAfter(addr, []string{"SELECT", strconv.Itoa(db)}, fmt.Sprint("SELECT ", db), args)
}

// doAfter sends args on a new connection to addr, after first (AUTH,
// SELECT; named what in its error) unless it is nil.
func doAfter(addr string, first []string, what string, args []string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(conn)
	if first != nil {
		if _, err := roundTrip(conn, r, first); err != nil {
			return "", fmt.Errorf("redistest: %s: %w", what, err)
		}
	}
	return roundTrip(conn, r, args)
}

func roundTrip(conn net.Conn, r *bufio.Reader, args []string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return "", err
	}
	return readReply(r)
}

func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("redistest: empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		parts := make([]string, 0, max(n, 0))
		for range n {
			p, err := readReply(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("redistest: unexpected reply %q", line)
}
