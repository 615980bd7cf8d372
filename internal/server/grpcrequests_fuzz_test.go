package server

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"golang.org/x/net/http2"
)

// requestModel is what the client's frames, read whole, leave held: the
// bytes of DATA on each call whose request is open, by the rules of
// unreadConn.received, written again frame by frame over the whole input.
func requestModel(data []byte) int64 {
	open := map[uint32]int64{}
	var last uint32
	for len(data) >= 9 {
		n := int(data[0])<<16 | int(data[1])<<8 | int(data[2])
		typ, flags, id := data[3], data[4], binary.BigEndian.Uint32(data[5:])&(1<<31-1)
		if len(data) < 9+n {
			break // the last frame, unfinished, is not read yet
		}
		data = data[9+n:]
		_, isOpen := open[id]
		end := flags&flagEndStream != 0
		switch {
		case typ == frameHeaders && id%2 == 1 && id > last:
			last = id
			if !end {
				open[id] = 0
			}
		case typ == frameHeaders && isOpen && end, typ == frameData && isOpen && end, typ == frameRSTStream:
			delete(open, id)
		case typ == frameData && isOpen:
			open[id] += int64(n)
		}
	}
	var held int64
	for _, n := range open {
		held += n
	}
	return held
}

// FuzzRequestBytes: any bytes from a client, the preface first, read in
// pieces of any size (a frame's header cut across two reads), leave the
// bytes of requests not yet whole that the frames read whole leave (as
// requestModel reads them), told to the listener's budget; with the
// server's frames (any bytes) between them, the account stays consistent:
// its total is its calls' open requests', none negative, none on a call
// whose request ended, and its place in the budget's line is its oldest
// request still arriving (the least stamp), its order of requests within
// twice the most arriving at once.
func FuzzRequestBytes(f *testing.F) {
	var b bytes.Buffer
	fr := http2.NewFramer(&b, nil)
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte("abc")})
	fr.WriteContinuation(1, true, []byte("de"))
	fr.WriteData(1, false, make([]byte, 40))
	fr.WritePing(false, [8]byte{})
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: []byte("abc"), EndHeaders: true})
	fr.WriteData(3, false, make([]byte, 20))
	fr.WriteWindowUpdate(0, 100)
	fr.WriteRSTStream(1, http2.ErrCodeCancel)
	fr.WriteDataPadded(3, false, make([]byte, 7), make([]byte, 3))
	fr.WriteGoAway(3, http2.ErrCodeNo, nil)
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: []byte("x"), EndHeaders: true, EndStream: true})
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 7, BlockFragment: []byte("x"), EndHeaders: true})
	fr.WriteData(7, false, make([]byte, 9))
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 7, BlockFragment: []byte("t"), EndHeaders: true, EndStream: true})
	client := bytes.Clone(b.Bytes())
	b.Reset()
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: []byte("s"), EndHeaders: true, EndStream: true})
	f.Add(client, []byte(nil), uint64(1))
	f.Add(client, bytes.Clone(b.Bytes()), uint64(2))
	f.Add([]byte{0, 0, 4, 1, 0, 0, 0, 0, 1, 1, 2, 3, 4, 0, 0, 2, 0, 0, 0, 0, 0, 1, 0, 0}, []byte{0, 0, 0, 3, 0, 0, 0, 0, 1}, uint64(9))
	f.Fuzz(func(t *testing.T, data, server []byte, seed uint64) {
		budget := newRequestBudget(1<<62, nil)
		u := requestConn(t, budget)
		u.in.skip = len(clientPreface)
		defer func() {
			if u.timer != nil {
				u.timer.Stop()
			}
		}()
		in := append([]byte(clientPreface), data...)
		rnd := rand.New(rand.NewPCG(seed, 3))
		piece := func(rest []byte) int {
			if len(rest) == 0 {
				return 0
			}
			return 1 + rnd.IntN(len(rest))
		}
		clientOnly := len(server) == 0
		most := 0 // requests arriving at once
		for len(in) > 0 || len(server) > 0 {
			n := piece(in)
			if err := u.account(&u.in, in[:n], u.received); err != nil {
				t.Fatalf("closed under a bound of 2^62 bytes: %v", err)
			}
			in = in[n:]
			m := piece(server)
			if err := u.account(&u.out, server[:m], u.sent); err != nil && err != errUnread {
				t.Fatalf("closed for its requests under a bound of 2^62 bytes: %v", err)
			}
			server = server[m:]
			var held int64
			var oldest uint64
			arriving := 0
			for id, st := range u.streams {
				if st.reqBytes < 0 || !st.reqOpen && st.reqBytes != 0 || (st.reqBytes > 0) != (st.reqSeq != 0) {
					t.Fatalf("call %d: %+v", id, st)
				}
				held += st.reqBytes
				if st.reqBytes > 0 {
					arriving++
					if oldest == 0 || st.reqSeq < oldest {
						oldest = st.reqSeq
					}
				}
			}
			if total, _ := budget.held(); u.reqHeld != held || !u.over && total != held {
				t.Fatalf("%d bytes counted, %d in the budget; the calls hold %d", u.reqHeld, total, held)
			}
			if !u.over && (u.reqOldest != oldest || u.reqEntry.since != oldest && held > 0) {
				t.Fatalf("place %d, in the budget %d; the oldest request arriving is %d", u.reqOldest, u.reqEntry.since, oldest)
			}
			most = max(most, arriving)
			if n := len(u.reqOrder) - u.reqFirst; n < arriving || cap(u.reqOrder) > 2*most+8 {
				t.Fatalf("order of %d (%d kept) for %d requests arriving, %d at most", cap(u.reqOrder), n, arriving, most)
			}
		}
		if m := requestModel(data); clientOnly && m != u.reqHeld {
			t.Fatalf("%d bytes counted in pieces, %d read whole", u.reqHeld, m)
		}
	})
}
