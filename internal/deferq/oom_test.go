package deferq_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A Redis at its maxmemory (noeviction) refuses the enqueue script at its
// first write with an OOM error: an answer, not a lost reply, and nothing
// was queued. The client must be answered as without defer (429: the store
// is unavailable), as the docs say of "Redis cannot take it", not 503
// defer_outcome_unknown, which sends it to ask where a request is that was
// never queued.
func TestEnqueueRedisFull(t *testing.T) {
	srv := redistest.StartServer(t)
	c := client(t, srv.Addr)
	q, err := newQueue(deferq.Options{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs"}})
	enqueue(t, q, "jobs", "warm", http.MethodPost, "/job", []byte("warm")) // loads the script
	ctx := context.Background()
	for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", "1"}} {
		if err := c.Do(ctx, c.B().ConfigSet().ParameterValue().ParameterValue(kv[0], kv[1]).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	r := httptest.NewRequest(http.MethodPost, "/job", bytes.NewReader([]byte("job")))
	_, err = q.Enqueue(ctx, "jobs", []string{"k"}, r, r.Header, []byte("job"))
	var unknown *deferq.OutcomeUnknownError
	if errors.As(err, &unknown) || !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Errorf("Enqueue into a Redis at maxmemory = %v; want sluice.ErrStoreUnavailable, not an unknown outcome (Redis answered: nothing queued)", err)
	}
	if err := c.Do(ctx, c.B().ConfigSet().ParameterValue().ParameterValue("maxmemory", "0").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	n, err := c.Do(ctx, c.B().Xlen().Key("sluice:defer:{"+deferq.Tag("jobs")+"}:q").Build()).AsInt64()
	if err != nil || n != 1 {
		t.Errorf("XLEN = %d, %v; want 1 (the warm-up only)", n, err)
	}
}
