package redisstore

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestRefundMessages: what a give-back publishes reads back as the keys
// it named, in order, whatever bytes they hold (":" and digits, empty
// namespaces and keys); a list of keys goes out in messages of at most
// maxRefundBatch bytes (a longer key alone), as few as fit; one key goes
// in the one-key form that subscribers read before there were lists,
// and a list starts with ":", which those subscribers refuse.
func TestRefundMessages(t *testing.T) {
	long := strings.Repeat("x", maxRefundBatch+10)
	for _, keys := range [][]nsName{
		{{"api", "k"}},
		{{"", ""}},
		{{"12:", "3:x"}},
		{{"api", "a"}, {"", "b"}, {"1:2", ""}, {"api", "a"}},
		{{"api", long}, {"api", "after"}},
	} {
		msgs := refundBatches(keys)
		var got []nsName
		for _, m := range msgs {
			if len(msgs) > 1 && len(m) > maxRefundBatch && !strings.Contains(m, long) {
				t.Errorf("a message of %d bytes; want at most %d", len(m), maxRefundBatch)
			}
			ks, ok := parseRefundMessage(m)
			if !ok {
				t.Fatalf("parseRefundMessage(%.40q) refused what refundBatches(%v) wrote", m, keys)
			}
			got = append(got, ks...)
		}
		if !slices.Equal(got, keys) {
			t.Errorf("refundBatches(%v) read back as %v", keys, got)
		}
		if len(keys) == 1 && (len(msgs) != 1 || msgs[0] != refundMessage(keys[0].ns, keys[0].name)) {
			t.Errorf("refundBatches of one key = %q; want the one-key form %q", msgs, refundMessage(keys[0].ns, keys[0].name))
		}
		if len(keys) > 1 && !strings.HasPrefix(msgs[0], ":") {
			t.Errorf("refundBatches(%v) = %q; want a list, starting with \":\"", keys, msgs)
		}
	}

	many := make([]nsName, 20000)
	size := 1
	for i := range many {
		many[i] = nsName{"api", fmt.Sprintf("key-%05d", i)}
		size += len("3:api9:") + len(many[i].name)
	}
	msgs := refundBatches(many)
	if want := (size + maxRefundBatch - 1) / maxRefundBatch; len(msgs) != want {
		t.Errorf("20,000 keys (%d bytes) in %d messages; want %d", size, len(msgs), want)
	}

	for _, bad := range []string{"", ":", "x", "01:a", "-1:", "5:ab", ":3:api", ":3:api1:", ":3:api2:k", ":3:api1:k0", "::"} {
		if ks, ok := parseRefundMessage(bad); ok {
			t.Errorf("parseRefundMessage(%q) = %v; want refused", bad, ks)
		}
	}
}

// FuzzRefundMessage: a message either reads as keys that, written again,
// read back the same, or is refused; never a panic.
func FuzzRefundMessage(f *testing.F) {
	for _, s := range []string{"3:apik", ":3:api1:k0:2:kk", "0:", ":", "12:x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, m string) {
		keys, ok := parseRefundMessage(m)
		if !ok {
			return
		}
		if len(keys) == 0 {
			t.Fatalf("parseRefundMessage(%q) accepted no key", m)
		}
		var again []nsName
		for _, w := range refundBatches(keys) {
			ks, ok := parseRefundMessage(w)
			if !ok {
				t.Fatalf("written again as %q, refused", w)
			}
			again = append(again, ks...)
		}
		if !slices.Equal(again, keys) {
			t.Fatalf("parseRefundMessage(%q) = %v; written again and read: %v", m, keys, again)
		}
	})
}
