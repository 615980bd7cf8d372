package redisstore

import (
	"fmt"
	"testing"
	"time"
)

// TestSentinelDialerShares: each Sentinel's connect and handshake is
// bounded by the timeout, or with several Sentinels by a share of New's
// bound (the timeout, at least a second) small enough that, one Sentinel
// hung, the next and the master still have room in it: at the default
// timeout, 50ms each (3 × 50ms in a second); at a second and more, a
// third of it with two Sentinels. TestSentinelHungAtStart connects past a
// frozen Sentinel on a real one at a 3s timeout.
func TestSentinelDialerShares(t *testing.T) {
	for _, c := range []struct {
		timeout   time.Duration
		sentinels int
		want      time.Duration
	}{
		{DefaultTimeout, 1, DefaultTimeout},
		{DefaultTimeout, 2, DefaultTimeout},
		{DefaultTimeout, 5, DefaultTimeout},
		{time.Second, 1, time.Second},
		{time.Second, 2, time.Second / 3},
		{time.Second, 3, time.Second / 4},
		{3 * time.Second, 2, time.Second},
		{300 * time.Millisecond, 2, 300 * time.Millisecond},
		{400 * time.Millisecond, 2, time.Second / 3},
	} {
		addrs := make([]string, c.sentinels)
		for i := range addrs {
			addrs[i] = fmt.Sprintf("127.0.0.1:%d", 26379+i)
		}
		o := Options{Addrs: addrs, Sentinel: "m", Timeout: c.timeout}
		d := sentinelDialer(o)
		if d.Timeout != c.want {
			t.Errorf("timeout %v, %d Sentinels: each bounded by %v, want %v", c.timeout, c.sentinels, d.Timeout, c.want)
		}
		if bound := max(c.timeout, time.Second); c.sentinels > 1 && time.Duration(c.sentinels+1)*d.Timeout > bound {
			t.Errorf("timeout %v, %d Sentinels: %d shares of %v pass New's bound %v: no room for the master after one hung", c.timeout, c.sentinels, c.sentinels+1, d.Timeout, bound)
		}
		if d.KeepAlive <= 0 {
			t.Errorf("timeout %v: KeepAlive %v, want it set (a hung Sentinel's connection is closed)", c.timeout, d.KeepAlive)
		}
	}
}
