package deferq_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A request queued under several keys of its rule is replayed when the
// rule's limit admits it on all of them: Take gets every key, the one it
// is queued under first, as Enqueue got them.
func TestReplayTakesEveryKey(t *testing.T) {
	srv := redistest.StartServer(t)
	up := newUpstream(t, nil)
	q, err := newQueue(deferq.Options{Client: client(t, srv.Addr), Upstream: mustURL(t, up.srv.URL)})
	if err != nil {
		t.Fatal(err)
	}
	asked := make(chan []string, 10)
	q.SetRules([]deferq.Rule{{Name: "jobs", Take: func(_ context.Context, keys []string) (sluice.Decision, error) {
		asked <- slices.Clone(keys)
		return sluice.Decision{Allowed: true}, nil
	}}})
	r := httptest.NewRequest(http.MethodPost, "/job", bytes.NewReader([]byte("job")))
	want := []string{"jobs|a", "jobs|b", "jobs|c"}
	if _, err := q.Enqueue(context.Background(), "jobs", want, r, r.Header, []byte("job")); err != nil {
		t.Fatal(err)
	}
	start(t, q)
	select {
	case got := <-asked:
		if !slices.Equal(got, want) {
			t.Errorf("Take(%q), want Take(%q): every key of the request, the queued one first", got, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no replay within 30 s")
	}
}
