package deferq_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The bound counts an entry's keys too: a rule keyed by a header, with
// four keys at the largest the daemon builds (64-byte rule name, "|", an
// 8-digit fingerprint, "|", 256 bytes of header value: 331 bytes each),
// queued requests whose target and headers fill MaxHeadBytes (a header
// value near the daemon's 1 MiB header limit) and whose bodies fill
// MaxBodyBytes. Each unread entry was counted at MaxBodyBytes +
// MaxHeadBytes while it held its keys (1.3 KB), id and stream id beside
// them, so an instance with room for three such entries and 1 KiB read
// three and held 4 KB more than MaxHeldBytes. Enqueue now counts what an
// entry holds besides its body against MaxHeadBytes: a request as large as
// it used to take is refused with ErrHeadTooLarge, one smaller by its keys
// and ids is queued, and what the instance holds stays within the bound.
func TestHeldBytesCountKeys(t *testing.T) {
	srv := redistest.StartServer(t)
	up := newUpstream(t, nil)
	c := client(t, srv.Addr)
	const body = 1 << 10
	const room = 3*(body+deferq.MaxHeadBytes) + 1<<10
	q, err := newQueue(deferq.Options{Client: c, Upstream: mustURL(t, up.srv.URL), MaxHeldBytes: room})
	if err != nil {
		t.Fatal(err)
	}
	take := func(context.Context, []string) (sluice.Decision, error) {
		return sluice.Decision{RetryAfter: time.Hour}, nil
	}
	q.SetRules([]deferq.Rule{{Name: "keys", MaxBodyBytes: body, Take: take}})
	const n = 5
	var sizes []int // what each queued entry holds: target, headers, keys, body
	refused := 0
	for i := range n {
		keys := make([]string, 4)
		keyBytes := 0
		for j := range keys {
			keys[j] = strings.Repeat("n", 64) + "|12345678|" + strconv.Itoa(i) + strconv.Itoa(j) + strings.Repeat("v", 254)
			keyBytes += len(keys[j])
		}
		target := "/k/" + strconv.Itoa(i)
		// A header value that makes target and headers, as queued (JSON),
		// exactly MaxHeadBytes: as large as Enqueue used to take.
		head := func(v int) (*http.Request, int) {
			r := httptest.NewRequest(http.MethodPost, target, nil)
			r.Header.Set("X-Key", strings.Repeat("h", v))
			hj, err := json.Marshal(r.Header)
			if err != nil {
				t.Fatal(err)
			}
			return r, len(hj) + len(target)
		}
		_, over := head(0)
		r, size := head(deferq.MaxHeadBytes - over)
		_, err := q.Enqueue(context.Background(), "keys", keys, r, r.Header, bytes.Repeat([]byte{'b'}, body))
		if errors.Is(err, deferq.ErrHeadTooLarge) {
			refused++
			// Smaller by its keys and 256 bytes for its ids and method.
			r, size = head(deferq.MaxHeadBytes - over - keyBytes - 256)
			_, err = q.Enqueue(context.Background(), "keys", keys, r, r.Header, bytes.Repeat([]byte{'b'}, body))
		}
		if err != nil {
			t.Fatalf("Enqueue #%d: %v", i, err)
		}
		sizes = append(sizes, size+keyBytes+body)
	}
	start(t, q)
	held := func() int {
		k, sum := int(pending(c, "keys")), 0
		for i := range min(k, n) {
			sum += sizes[i]
		}
		return sum
	}
	// It reads while the bound leaves room for one more entry at its
	// largest (MaxBodyBytes + MaxHeadBytes), those held counted at their
	// size; the entries are read in the order queued.
	waitFor(t, "the instance to read as far as the bound lets it", 30*time.Second, func() bool {
		return held()+body+deferq.MaxHeadBytes > room
	})
	if got := held(); got > room {
		t.Fatalf("the instance holds %d requests, %d bytes of targets, headers, keys and bodies, over MaxHeldBytes (%d)", pending(c, "keys"), got, room)
	}
	if refused != n {
		t.Errorf("%d of %d requests whose target and headers alone fill MaxHeadBytes were refused, want all (ErrHeadTooLarge: their keys count too)", refused, n)
	}
	if got := pending(c, "keys"); got != 3 {
		t.Errorf("the instance holds %d of the %d queued, want 3 (room for three at their largest)", got, n)
	}
}
