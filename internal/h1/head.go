package h1

import (
	"bufio"
	"net/textproto"
	"strconv"
	"strings"
)

// headWriter appends an answer's head (status line, header lines) to the
// free space of the connection's write buffer and hands it to the buffer
// once, at done: per line, a few appends instead of four WriteString
// calls. A line that does not fit the free space goes through bw as it
// is (bw flushes as it fills), and the appending goes on after it.
type headWriter struct {
	bw *bufio.Writer
	b  []byte // bw.AvailableBuffer(), appended to
}

func newHeadWriter(bw *bufio.Writer) headWriter {
	return headWriter{bw: bw, b: bw.AvailableBuffer()}
}

// str appends s.
func (hw *headWriter) str(s string) {
	if len(hw.b)+len(s) > cap(hw.b) {
		hw.spill(s, "", "", "")
		return
	}
	hw.b = append(hw.b, s...)
}

// field appends the line "k: v", the value as net/http writes it
// (newlines become spaces, trimmed).
func (hw *headWriter) field(k, v string) {
	if !plainValue(v) {
		if strings.ContainsAny(v, "\r\n") {
			v = newlineToSpace.Replace(v)
		}
		v = textproto.TrimString(v)
	}
	if len(hw.b)+len(k)+len(v)+4 > cap(hw.b) {
		hw.spill(k, ": ", v, "\r\n")
		return
	}
	b := append(hw.b, k...)
	b = append(b, ':', ' ')
	b = append(b, v...)
	hw.b = append(b, '\r', '\n')
}

// int appends the line "k: n".
func (hw *headWriter) int(k string, n int64) {
	if len(hw.b)+len(k)+4+20 > cap(hw.b) {
		hw.spill(k, ": ", strconv.FormatInt(n, 10), "\r\n")
		return
	}
	b := append(hw.b, k...)
	b = append(b, ':', ' ')
	b = strconv.AppendInt(b, n, 10)
	hw.b = append(b, '\r', '\n')
}

// spill hands what was appended to bw, writes the strings through it,
// and goes on appending in bw's free space after them.
func (hw *headWriter) spill(a, b, c, d string) {
	hw.bw.Write(hw.b)
	for _, s := range [...]string{a, b, c, d} {
		hw.bw.WriteString(s)
	}
	hw.b = hw.bw.AvailableBuffer()
}

// done hands the head to bw.
func (hw *headWriter) done() {
	hw.bw.Write(hw.b)
	hw.b = nil
}
