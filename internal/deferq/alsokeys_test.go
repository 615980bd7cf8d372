package deferq_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// An entry whose list of other keys cannot be read (written by hand,
// damaged) is dead-lettered as malformed: replayed on its first key alone
// it would pass limits the rule's other keys hold.
func TestMalformedKeysDeadLettered(t *testing.T) {
	srv := redistest.StartServer(t)
	c := client(t, srv.Addr)
	q, up := jobsQueueOn(t, c, admitAll)
	base := "sluice:defer:{" + deferq.Tag("jobs") + "}:"
	ctx := context.Background()
	id := deferq.Tag("jobs") + "-0123456789abcdef0123"
	sid, err := c.Do(ctx, c.B().Xadd().Key(base+"q").Id("*").FieldValue().FieldValue("id", id).FieldValue("key", "k").
		FieldValue("method", "POST").FieldValue("uri", "/x").FieldValue("also", "[not json").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	// Indexed by its entry id, as the enqueue indexes a request.
	if err := c.Do(ctx, c.B().Hset().Key(base+"i").FieldValue().FieldValue(sid, id).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	start(t, q)
	var dead []string
	waitFor(t, "the entry dead-lettered", 30*time.Second, func() bool {
		es, err := c.Do(ctx, c.B().Xrange().Key(base+"dead").Start("-").End("+").Build()).AsXRange()
		dead = dead[:0]
		for _, e := range es {
			dead = append(dead, e.FieldValues["error"])
		}
		return err == nil && len(es) > 0
	})
	if len(dead) != 1 || !strings.Contains(dead[0], "malformed entry: keys") {
		t.Errorf("dead letters %q; want one, malformed entry: keys …", dead)
	}
	if got, _ := up.snapshot(); len(got) != 0 {
		t.Errorf("%d deliveries, want none", len(got))
	}
	// Dead-lettered and deleted from the stream, it leaves the index in
	// the same step: nothing would find that entry again to clean it.
	if n, err := c.Do(ctx, c.B().Exists().Key(base+"i").Build()).AsInt64(); err != nil || n != 0 {
		t.Errorf("stream-id index after the entry was dead-lettered: EXISTS %d, %v; want 0", n, err)
	}
}
