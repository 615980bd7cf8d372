package server

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"golang.org/x/net/http2"
)

// FuzzUnreadAccount: any bytes, as a client's (after the preface) and as
// the server's, fed in pieces of any size, give the frames they give fed
// whole, and the account stays consistent: never more exhausted answers
// than begun ones, nor more begun than calls known, none negative.
func FuzzUnreadAccount(f *testing.F) {
	var b bytes.Buffer
	fr := http2.NewFramer(&b, nil)
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10})
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte("abc"), EndHeaders: true})
	fr.WriteData(1, false, []byte("0123456789ab"))
	fr.WriteWindowUpdate(1, 5)
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	fr.WriteRSTStream(1, http2.ErrCodeCancel)
	f.Add(b.Bytes(), uint64(1))
	f.Add([]byte{0, 0, 4, 8, 0, 0, 0, 0, 1, 0x7f, 0xff, 0xff, 0xff}, uint64(7))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		frames := func(pieces bool) []string {
			var s frameScanner
			var got []string
			rec := func(h frameHeader, p []byte) { got = append(got, fmt.Sprintf("%+v %x", h, p)) }
			if !pieces {
				s.scan(data, rec)
				return got
			}
			rnd := rand.New(rand.NewPCG(seed, 1))
			for rest := data; len(rest) > 0; {
				n := 1 + rnd.IntN(len(rest))
				s.scan(rest[:n], rec)
				rest = rest[n:]
			}
			return got
		}
		if whole, cut := frames(false), frames(true); fmt.Sprint(whole) != fmt.Sprint(cut) {
			t.Fatalf("in pieces: %q\nwhole: %q", cut, whole)
		}
		u := newUnreadConn(nil, nil, 0, newUnreadBudget(MaxUnreadTotal))
		u.in.skip = 0
		rnd := rand.New(rand.NewPCG(seed, 2))
		for rest := data; len(rest) > 0; {
			n := 1 + rnd.IntN(len(rest))
			// The same bytes as the client's and as the server's, so that
			// both sides' frames meet the same calls.
			u.in.scan(rest[:n], u.received)
			u.out.scan(rest[:n], u.sent)
			rest = rest[n:]
			if u.exhausted < 0 || u.started < u.exhausted || len(u.streams) < u.started {
				t.Fatalf("account: %d exhausted, %d begun, %d calls", u.exhausted, u.started, len(u.streams))
			}
		}
	})
}
