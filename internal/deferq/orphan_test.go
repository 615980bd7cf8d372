package deferq_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// admitAll is a replay limit that always admits.
func admitAll(context.Context, []string) (sluice.Decision, error) {
	return sluice.Decision{Allowed: true}, nil
}

// The queue's own structures can lose a part (an operator's XDEL or XTRIM
// of the stream to shed a backlog, eviction under an allkeys-* maxmemory
// policy, a DEL): a key's requests must still go out. A request of the
// key used to wait for ever behind a list head whose request was gone, and
// a request whose id had left the key's list waited for ever for its turn.
func TestKeyOrderPartLost(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(c rueidis.Client, base, id1 string) error
		want []string // paths delivered, in order
	}{
		{"first entry deleted", func(c rueidis.Client, base, id1 string) error {
			return c.Do(context.Background(), c.B().Xdel().Key(base+"q").Id(sidOf(t, c, base, id1)).Build()).Error()
		}, []string{"/2"}},
		{"first entry and its record deleted", func(c rueidis.Client, base, id1 string) error {
			sid := sidOf(t, c, base, id1)
			if err := c.Do(context.Background(), c.B().Xdel().Key(base+"q").Id(sid).Build()).Error(); err != nil {
				return err
			}
			return c.Do(context.Background(), c.B().Del().Key(base+"s:"+id1).Build()).Error()
		}, []string{"/2"}},
		{"key list deleted", func(c rueidis.Client, base, id1 string) error {
			return c.Do(context.Background(), c.B().Del().Key(base+"k:"+listDigest("k")).Build()).Error()
		}, []string{"/1", "/2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			c := client(t, srv.Addr)
			up := newUpstream(t, nil)
			q, err := newQueue(deferq.Options{Client: c, Consumer: "a", Upstream: mustURL(t, up.srv.URL),
				ClaimIdle: time.Hour, DeliveryTimeout: 10 * time.Minute}) // one instance: no claims; no send cut off and sent again, out of order
			if err != nil {
				t.Fatal(err)
			}
			q.SetRules([]deferq.Rule{{Name: "jobs", Take: admitAll}})
			id1 := enqueue(t, q, "jobs", "k", http.MethodPost, "/1", []byte("1"))
			id2 := enqueue(t, q, "jobs", "k", http.MethodPost, "/2", []byte("2"))
			base := "sluice:defer:{" + deferq.Tag("jobs") + "}:"
			if err := tc.lose(c, base, id1); err != nil {
				t.Fatal(err)
			}
			start(t, q)
			for i, want := range tc.want {
				select {
				case d := <-up.arrivals:
					if d.path != want {
						t.Errorf("delivery %d: %s, want %s", i, d.path, want)
					}
				case <-time.After(30 * time.Second): // a bound, not a wait: the delivery comes within a second
					st, err := q.Status(context.Background(), id2)
					t.Fatalf("delivery %d (%s) never came; %s: %+v, %v", i, want, id2, st, err)
				}
			}
			awaitState(t, q, id2, "delivered")
		})
	}
}

// listDigest names a limiter key's list of ids, as deferq does.
func listDigest(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:10])
}

// sidOf is the stream entry id of request id.
func sidOf(t *testing.T, c rueidis.Client, base, id string) string {
	t.Helper()
	sid, err := c.Do(context.Background(), c.B().Hget().Key(base+"s:"+id).Field("sid").Build()).ToString()
	if err != nil {
		t.Fatalf("sid of %s: %v", id, err)
	}
	return sid
}
