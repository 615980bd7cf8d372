package sim

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Bounds on one line of a trace.
const (
	// MaxLineBytes bounds a line, comment included, end of line ("\n" or
	// "\r\n") not.
	MaxLineBytes = 64 << 10
	// MaxKeyBytes bounds a key.
	MaxKeyBytes = 1024
	// MaxCost bounds a request's cost: 2^53, the largest integer every
	// store (Redis's Lua numbers are doubles) counts exactly.
	MaxCost = 1 << 53
	// MaxMicros is the latest time a trace may name, in µs since the
	// epoch: sluice.MaxTime (2112-09-17), the latest a store decides at.
	MaxMicros = 1 << 52
)

// Request is one line of a trace: at Micros (microseconds since the Unix
// epoch), Key asks for Cost.
type Request struct {
	Line   int // 1-based line number in the trace
	Micros int64
	Key    string
	Cost   int64
}

// LineError is bad input: File and Line name where.
type LineError struct {
	File string // the trace's name, such as "trace.csv" or "stdin"
	Line int    // 1-based
	Msg  string
}

func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg) }

// Reader reads a trace: one request per line, "t,key[,cost]", where t is
// seconds since the Unix epoch as a decimal with at most six decimals
// ("12.000250"), key is non-empty, and cost is a whole number ≥ 0 (default
// 1). Whitespace around fields is ignored; "#" starts a comment that runs to
// the end of the line; blank lines are skipped; a first line "t,key" or
// "t,key,cost" is taken as a header and skipped. Times must not go
// backwards. Every error is a *LineError.
type Reader struct {
	sc     *bufio.Scanner
	name   string
	line   int
	last   int64 // time of the previous request
	seen   bool  // a request or header has been read
	keys   map[string]string
	failed error
}

// NewReader returns a Reader of the trace r; name is used in errors.
func NewReader(r io.Reader, name string) *Reader {
	sc := bufio.NewScanner(r)
	// Room for the longest line and its "\r\n": read checks the line itself.
	sc.Buffer(make([]byte, 0, 4096), MaxLineBytes+2)
	return &Reader{sc: sc, name: name, keys: make(map[string]string)}
}

// Read returns the next request, or io.EOF after the last one. After an
// error, Read returns the same error again.
func (r *Reader) Read() (Request, error) {
	if r.failed != nil {
		return Request{}, r.failed
	}
	req, err := r.read()
	if err != nil {
		r.failed = err
	}
	return req, err
}

func (r *Reader) read() (Request, error) {
	for r.sc.Scan() {
		r.line++
		b := r.sc.Bytes() // the end of line, "\n" or "\r\n", left out
		if len(b) > MaxLineBytes {
			return Request{}, r.tooLong(r.line)
		}
		if r.line == 1 {
			b = bytes.TrimPrefix(b, []byte("\uFEFF")) // a UTF-8 byte order mark
		}
		if i := bytes.IndexByte(b, '#'); i >= 0 {
			b = b[:i]
		}
		text := strings.TrimSpace(string(b))
		if text == "" {
			continue
		}
		if !r.seen && isHeader(text) {
			r.seen = true
			continue
		}
		r.seen = true
		req, err := r.parse(text)
		if err != nil {
			return Request{}, &LineError{File: r.name, Line: r.line, Msg: err.Error()}
		}
		return req, nil
	}
	if err := r.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return Request{}, r.tooLong(r.line + 1)
		}
		return Request{}, fmt.Errorf("sim: read %s: %w", r.name, err)
	}
	return Request{}, io.EOF
}

func (r *Reader) tooLong(line int) error {
	return &LineError{File: r.name, Line: line, Msg: fmt.Sprintf("line longer than %d bytes", MaxLineBytes)}
}

func isHeader(s string) bool {
	f := strings.Split(s, ",")
	for i := range f {
		f[i] = strings.TrimSpace(f[i])
	}
	return (len(f) == 2 || len(f) == 3 && f[2] == "cost") && f[0] == "t" && f[1] == "key"
}

func (r *Reader) parse(text string) (Request, error) {
	f := strings.Split(text, ",")
	if len(f) < 2 {
		return Request{}, fmt.Errorf("want t,key[,cost], got %d fields in %q", len(f), clip(text))
	}
	if len(f) > 3 {
		return Request{}, fmt.Errorf("want t,key[,cost], got %d fields in %q%s", len(f), clip(text), commaHint)
	}
	us, err := ParseTime(strings.TrimSpace(f[0]))
	if err != nil {
		return Request{}, err
	}
	if us < r.last {
		return Request{}, fmt.Errorf("time %s goes backwards (the previous request was at %s)", FormatTime(us), FormatTime(r.last))
	}
	key, err := r.key(strings.TrimSpace(f[1]))
	if err != nil {
		return Request{}, err
	}
	cost := int64(1)
	if len(f) == 3 {
		c := strings.TrimSpace(f[2])
		if cost, err = parseCost(c); err != nil {
			if strings.IndexFunc(c, unicode.IsLetter) >= 0 {
				err = fmt.Errorf("%w%s", err, commaHint) // "1,GET /a,b"
			}
			return Request{}, err
		}
	}
	r.last = us
	return Request{Line: r.line, Micros: us, Key: key, Cost: cost}, nil
}

// commaHint ends the message about a line that may hold a key with a comma.
const commaHint = ` (a key cannot hold a ",")`

// key checks k and interns it, so that a long trace keeps one copy of each.
func (r *Reader) key(k string) (string, error) {
	if s, ok := r.keys[k]; ok {
		return s, nil
	}
	switch {
	case k == "":
		return "", errors.New("empty key")
	case len(k) > MaxKeyBytes:
		return "", fmt.Errorf("key of %d bytes is longer than %d", len(k), MaxKeyBytes)
	case !utf8.ValidString(k):
		return "", fmt.Errorf("key %q is not valid UTF-8", clip(k))
	}
	for _, c := range k {
		if c < 0x20 || c == 0x7f {
			return "", fmt.Errorf("key %q contains a control character", clip(k))
		}
	}
	r.keys[k] = k
	return k, nil
}

func parseCost(s string) (int64, error) {
	if s == "" {
		return 0, errors.New("empty cost (omit the field for cost 1)")
	}
	if !allDigits(s) {
		return 0, fmt.Errorf("cost %q is not a whole number ≥ 0", clip(s))
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > MaxCost {
		return 0, fmt.Errorf("cost %q is larger than %d", clip(s), int64(MaxCost))
	}
	return n, nil
}

// ParseTime reads seconds since the Unix epoch written as a decimal with at
// most six decimals ("12", "12.5", "1732000000.000250") into microseconds,
// exactly: no floating point. Decimals past the sixth must be zeros.
func ParseTime(s string) (int64, error) {
	if strings.HasPrefix(s, "-") {
		return 0, fmt.Errorf("time %q is negative", clip(s))
	}
	whole, frac, dot := strings.Cut(s, ".")
	if whole == "" || !allDigits(whole) || dot && (frac == "" || !allDigits(frac)) {
		return 0, fmt.Errorf("time %q is not seconds as a decimal such as 12.000250", clip(s))
	}
	whole = strings.TrimLeft(whole, "0")
	if len(whole) > len(strconv.Itoa(MaxMicros/1_000_000)) {
		return 0, tooLate(s)
	}
	sec, _ := strconv.ParseInt("0"+whole, 10, 64)
	if sec > MaxMicros/1_000_000 {
		return 0, tooLate(s)
	}
	if len(frac) > 6 {
		if strings.Trim(frac[6:], "0") != "" {
			return 0, fmt.Errorf("time %q has more than 6 decimals (the resolution is one microsecond)", clip(s))
		}
		frac = frac[:6]
	}
	frac += "000000"[len(frac):]
	us, _ := strconv.ParseInt(frac, 10, 64)
	if sec*1e6+us > MaxMicros {
		return 0, tooLate(s)
	}
	return sec*1e6 + us, nil
}

func tooLate(s string) error {
	return fmt.Errorf("time %q is after 2112-09-17 (%s, the latest time a store decides at)", clip(s), FormatTime(MaxMicros))
}

// FormatTime writes microseconds since the epoch as seconds with six
// decimals, as ParseTime reads them: 12000250 is "12.000250".
func FormatTime(us int64) string { return string(appendTime(nil, us)) }

// FormatDuration writes d in seconds with six decimals (d is rounded down to
// whole microseconds), and sluice.Never (any negative d) as "-1".
func FormatDuration(d time.Duration) string { return string(appendDuration(nil, d)) }

func appendTime(b []byte, us int64) []byte {
	if us < 0 {
		b = append(b, '-')
		if us == math.MinInt64 {
			return append(b, "9223372036854.775808"...)
		}
		us = -us
	}
	b = strconv.AppendInt(b, us/1e6, 10)
	frac := us % 1e6
	b = append(b, '.')
	for div := int64(1e5); div > 0; div /= 10 {
		b = append(b, byte('0'+frac/div%10))
	}
	return b
}

func appendDuration(b []byte, d time.Duration) []byte {
	if d < 0 {
		return append(b, "-1"...)
	}
	return appendTime(b, int64(d/time.Microsecond))
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) <= 40 {
		return s
	}
	for i := 40; i > 0; i-- {
		if utf8.RuneStart(s[i]) {
			return s[:i] + "…"
		}
	}
	return s[:40] + "…"
}
