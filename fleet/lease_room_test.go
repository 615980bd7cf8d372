package fleet

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestLeaseRoomCost: a Lease at MaxKeys whose keys go idle one at a time,
// as under steady wide traffic (a new key every millisecond, each idle a
// period, a second, later), sweeps its keys at most once per MaxKeys/16
// new keys, looking at about 16 keys per new key. Sweeping whenever a new
// key found it full freed one key per pass: a pass over all the keys per
// new key, under the Lease's one lock (minutes for 1,000,000 keys).
func TestLeaseRoomCost(t *testing.T) {
	const maxKeys, extra = 1000, 20_000
	l, err := NewLease(nullShared{}, LeaseOptions{MaxKeys: maxKeys})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	take := func(i int) {
		r := sluice.Request{Key: fmt.Sprintf("room/%d", i), Algorithm: sluice.FixedWindow, Limit: sluice.PerSecond(1000), Cost: 1,
			Now: sluicetest.T0.Add(time.Duration(i) * time.Millisecond)}
		for range 2 { // the second makes it an entry, if there is room
			if _, err := l.Take(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range maxKeys {
		take(i)
	}
	if n := l.Stats().Keys; n != maxKeys {
		t.Fatalf("after %d keys: %d held, want %d", maxKeys, n, maxKeys)
	}
	before := l.swept
	for i := maxKeys; i < maxKeys+extra; i++ {
		take(i)
	}
	per := float64(l.swept-before) / extra
	t.Logf("%d new keys at MaxKeys %d: sweeps looked at %.1f keys per new key; %+v", extra, maxKeys, per, l.Stats())
	if per > 40 {
		t.Errorf("sweeps looked at %.1f keys per new key, want about 16 (one pass over the %d keys per %d new keys)", per, maxKeys, maxKeys/16)
	}
	if st := l.Stats(); st.Keys < maxKeys/2 {
		t.Errorf("%d keys held, want the room used (at least %d)", st.Keys, maxKeys/2)
	}
}
