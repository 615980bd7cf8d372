package server

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// FuzzUnreadAccount: any bytes, as a client's (after the preface) and as
// the server's, fed in pieces of any size, give the frames they give fed
// whole, and the account stays consistent: its counts of answers begun,
// exhausted and idle, and of the clock's backlog, are those of its calls.
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
		u := newUnreadConn(nil, nil, time.Hour, newUnreadBudget(MaxUnreadTotal))
		u.in.skip = 0
		defer func() {
			if u.timer != nil {
				u.timer.Stop()
			}
		}()
		rnd := rand.New(rand.NewPCG(seed, 2))
		for rest := data; len(rest) > 0; {
			n := 1 + rnd.IntN(len(rest))
			// The same bytes as the client's and as the server's, so that
			// both sides' frames meet the same calls.
			u.in.scan(rest[:n], u.received)
			u.out.scan(rest[:n], u.sent)
			rest = rest[n:]
			// The clock, started and stopped at random (it never fires).
			if rnd.IntN(3) == 0 {
				if u.timer == nil {
					u.startClock()
				} else {
					u.timer.Stop()
					u.timer = nil
				}
			}
			var started, exhausted, idle, flagged, backlog int
			for _, st := range u.streams {
				if st.started {
					started++
					if st.idle {
						flagged++
					}
					if st.window <= 0 {
						exhausted++
					} else if st.idle {
						idle++
					}
				}
				if st.backlog && st.waiting() {
					backlog++
				}
			}
			if u.started != started || u.exhausted != exhausted || u.idle != idle || u.flagged != flagged {
				t.Fatalf("account: %d begun, %d exhausted, %d idle, %d flagged; the calls say %d, %d, %d, %d",
					u.started, u.exhausted, u.idle, u.flagged, started, exhausted, idle, flagged)
			}
			if u.timer != nil && u.backlog != backlog {
				t.Fatalf("account: backlog %d, the calls say %d", u.backlog, backlog)
			}
		}
	})
}
