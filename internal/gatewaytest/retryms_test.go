package gatewaytest

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestGatewayRetryAfterMillis: the 429 body's retry_after_ms is Sluice's
// own figure, to the millisecond, through every gateway; Retry-After stays
// whole seconds. The login rule is 7/100s with a burst of 1, so a second
// login Δ after the first waits 100s/7 − Δ (14285.715 ms − Δ), never a
// whole second. nginx, which keeps no body of Sluice's answer, wrote
// Retry-After × 1000 there (15000).
func TestGatewayRetryAfterMillis(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			a := startApp(t)
			y := replace(t, sluiceYAML(t, k.sluice, ""), "rate: 1/h\n", "rate: 7/100s\n    burst: 1\n")
			s := startSluice(t, y)
			g := k.start(t, s.addr, a.addr(), variant{})
			c := client("127.0.0.61")
			send1 := time.Now()
			if r := send(t, c, "POST", g.url+"/login", nil); r.status != http.StatusOK {
				t.Fatalf("first login: got %v, want 200", r)
			}
			recv1 := time.Now()
			send2 := time.Now()
			r := send(t, c, "POST", g.url+"/login", nil)
			recv2 := time.Now()
			if r.status != http.StatusTooManyRequests {
				t.Fatalf("second login: got %v, want 429", r)
			}
			if got := r.header.Get("Retry-After"); got != "15" {
				t.Errorf("second login: Retry-After = %q, want 15 (14.3s rounded up)", got)
			}
			var body struct {
				Error        string `json:"error"`
				Rule         string `json:"rule"`
				RetryAfterMS int64  `json:"retry_after_ms"`
			}
			if err := json.NewDecoder(strings.NewReader(r.body)).Decode(&body); err != nil || body.Rule != "login" {
				t.Fatalf("second login: body %q (%v), want login's", r.body, err)
			}
			// The wait, in µs, is 14285715 − Δ with Δ between the two
			// requests' gap and their span; a millisecond of slack each
			// way for the clocks' reading.
			lo := (14285715-recv2.Sub(send1).Microseconds())/1000 - 1
			hi := (14285715-send2.Sub(recv1).Microseconds()+999)/1000 + 1
			if body.RetryAfterMS < lo || body.RetryAfterMS > hi {
				t.Errorf("second login: retry_after_ms %d, want Sluice's exact wait, in [%d, %d]", body.RetryAfterMS, lo, hi)
			}
		})
	}
}
