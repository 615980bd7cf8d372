package server

import "encoding/binary"

// frameHeader is an HTTP/2 frame's header (RFC 9113 §4.1).
type frameHeader struct {
	length uint32
	typ    byte
	flags  byte
	stream uint32
}

// frameScanner splits a byte stream of HTTP/2 frames, fed in pieces of
// any size, into frames: their headers, with the payloads of SETTINGS and
// WINDOW_UPDATE frames (up to maxCollect bytes), the others' skipped.
type frameScanner struct {
	skip    int // bytes to pass over first (the client preface)
	hdr     [9]byte
	nhdr    int
	cur     frameHeader
	left    uint32 // the current frame's payload bytes still to come
	collect bool   // keep the current frame's payload
	payload []byte
}

// scan feeds b, calling f on each frame as its payload ends.
func (s *frameScanner) scan(b []byte, f func(h frameHeader, payload []byte)) {
	if s.skip > 0 {
		n := min(s.skip, len(b))
		s.skip -= n
		b = b[n:]
	}
	for {
		if s.nhdr < len(s.hdr) {
			n := copy(s.hdr[s.nhdr:], b)
			s.nhdr += n
			b = b[n:]
			if s.nhdr < len(s.hdr) {
				return
			}
			h := s.hdr[:]
			s.cur = frameHeader{
				length: uint32(h[0])<<16 | uint32(h[1])<<8 | uint32(h[2]),
				typ:    h[3],
				flags:  h[4],
				stream: binary.BigEndian.Uint32(h[5:]) & (1<<31 - 1),
			}
			s.left = s.cur.length
			s.collect = (s.cur.typ == frameSettings || s.cur.typ == frameWindowUpdate) && s.cur.length <= maxCollect
			s.payload = s.payload[:0]
		}
		n := min(int(s.left), len(b))
		if s.collect {
			s.payload = append(s.payload, b[:n]...)
		}
		s.left -= uint32(n)
		b = b[n:]
		if s.left > 0 {
			return
		}
		f(s.cur, s.payload)
		s.nhdr = 0
	}
}
