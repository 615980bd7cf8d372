package deferq_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The dead-letter stream holds full requests (bodies up to max_body_bytes)
// and is bounded as the queue is, by the rule's max_queue, so that Redis
// holds at most twice the queue's bound per rule. It used to keep about
// 100,000 whatever the queue's bound: with 1 MiB bodies, 100 GB against
// the 10 GB of a full queue.
func TestDeadLettersBoundedByMaxQueue(t *testing.T) {
	srv := redistest.StartServer(t)
	up := newUpstream(t, func(delivery, int) int { return http.StatusInternalServerError })
	c := client(t, srv.Addr)
	q, err := newQueue(deferq.Options{Client: c, Upstream: mustURL(t, up.srv.URL), MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "hooks", MaxQueue: 2}})
	start(t, q)
	var last []string
	for range 3 {
		last = nil
		for range 2 {
			last = append(last, enqueue(t, q, "hooks", "k", http.MethodPost, "/x", []byte("x")))
		}
		for _, id := range last {
			awaitState(t, q, id, "dead_lettered")
		}
	}
	dead, err := c.Do(context.Background(), c.B().Xrange().Key("sluice:defer:{"+deferq.Tag("hooks")+"}:dead").Start("-").End("+").Build()).AsXRange()
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 2 || dead[0].FieldValues["id"] != last[0] || dead[1].FieldValues["id"] != last[1] {
		ids := []string{}
		for _, e := range dead {
			ids = append(ids, e.FieldValues["id"])
		}
		t.Errorf("dead letters after 6 of a rule with max_queue 2: %v, want the last 2 %v", ids, last)
	}
}
