package proxy_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/rules"
)

// A request whose enqueue ran in Redis but whose reply was lost, Redis
// then unreachable, may be queued: it is answered 503 with the id it is
// queued under if it is, not 429 (which told the client to send it again:
// done twice once the queue replays the first).
func TestDeferOutcomeUnknown(t *testing.T) {
	srv := redistest.StartServer(t)
	x := redistest.NewCutter(t, srv.Addr, "marked-body", true)
	q, err := deferq.New(deferq.Options{Client: x.Client(t)})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs"}})
	f := start(t, setup{specs: []rules.Spec{{Name: "jobs", Rate: "1/m", Action: "defer"}}, deferq: q})
	post := func(body string) (*http.Response, string) {
		t.Helper()
		resp, err := http.Post(f.proxy.URL+"/job", "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	if resp, body := post("first"); resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: %d %s, want 200 (under the limit)", resp.StatusCode, body)
	}
	if resp, body := post("warm"); resp.StatusCode != http.StatusAccepted { // loads the script
		t.Fatalf("second request: %d %s, want 202 (deferred)", resp.StatusCode, body)
	}
	x.Arm()
	resp, body := post("marked-body")
	if !x.Cut() {
		t.Fatal("the cutter never saw the enqueue: the test proves nothing")
	}
	var a struct {
		Error string `json:"error"`
		ID    string `json:"deferred_id"`
	}
	json.Unmarshal([]byte(body), &a)
	if resp.StatusCode != http.StatusServiceUnavailable || a.Error != "defer_outcome_unknown" || a.ID == "" ||
		resp.Header.Values("Location") != nil || resp.Header.Get("Retry-After") != "" {
		t.Fatalf("enqueue's reply lost, Redis gone: %d %s (Location %q, Retry-After %q); want 503 defer_outcome_unknown with the id, no Location (the status is on the decision API), no Retry-After",
			resp.StatusCode, body, resp.Header.Get("Location"), resp.Header.Get("Retry-After"))
	}
	direct, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(direct.Close)
	check, err := deferq.New(deferq.Options{Client: direct})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := check.Status(context.Background(), a.ID); err != nil || st.State != "queued" {
		t.Errorf("Status(%s) = %+v, %v; want queued: the id answered must name the request queued", a.ID, st, err)
	}
}
