package hotkeys

import (
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// hotKeySeries gathers s from a registry and returns the key label of
// every sluice_hot_key_rate series, failing on a Gather error.
func hotKeySeries(t *testing.T, s *Set) []string {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(s)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	var keys []string
	for _, mf := range mfs {
		if mf.GetName() != "sluice_hot_key_rate" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "key" {
					keys = append(keys, l.GetValue())
				}
			}
		}
	}
	return keys
}

// A key part sent by a client may hold any byte (a header value may carry
// bytes 0x80–0xff), and a cut at MaxKeyBytes may split a character: the
// metrics still carry each key as a valid UTF-8 label value. (An invalid
// one made Collect panic, and with it the daemon, on the next scrape.)
func TestCollectKeyText(t *testing.T) {
	s := NewSet(Options{Sample: 1}, 0, 0)
	r := s.Rule("api")
	now := time.Now()
	r.Observe("api|3f2a91c0|\xff\xfe", 1, now)
	r.Observe("api|3f2a91c0|a"+strings.Repeat("é", 200), 1, now) // cut at 256 bytes falls inside an é
	keys := hotKeySeries(t, s)
	if len(keys) != 2 {
		t.Fatalf("sluice_hot_key_rate series keys %q, want 2", keys)
	}
	for _, k := range keys {
		if !utf8.ValidString(k) || !strings.HasPrefix(k, "api|3f2a91c0|") {
			t.Errorf("key label %q: want valid UTF-8 starting with the key's head", k)
		}
	}
}

// Two long keys alike in their first MaxKeyBytes are two series with two
// key labels, and two entries of GET /v1/hotkeys: the same text twice made
// Gather fail ("collected before with the same name and label values"),
// every scrape of /metrics with it.
func TestLongKeysDistinct(t *testing.T) {
	s := NewSet(Options{Sample: 1}, 0, 0)
	r := s.Rule("api")
	now := time.Now()
	head := "api|3f2a91c0|" + strings.Repeat("x", 600)
	r.Observe(head+"1", 2, now)
	r.Observe(head+"2", 1, now)
	keys := hotKeySeries(t, s)
	if len(keys) != 2 || keys[0] == keys[1] {
		t.Fatalf("sluice_hot_key_rate key labels %q, want 2 distinct", keys)
	}
	top := s.Top(10, now)
	if len(top) != 1 || len(top[0].Keys) != 2 || top[0].Keys[0].Key == top[0].Keys[1].Key {
		t.Fatalf("Top = %+v, want rule api with 2 distinct keys", top)
	}
	for _, k := range top[0].Keys {
		if !strings.HasPrefix(k.Key, head[:DefaultMaxKeyBytes]) || len(k.Key) > DefaultMaxKeyBytes+32 {
			t.Errorf("key %q (%d bytes): want the first %d bytes, then a short mark", k.Key, len(k.Key), DefaultMaxKeyBytes)
		}
	}
	// The same key is reported the same way every time (and by every
	// instance, for comparing their reports).
	other := NewSet(Options{Sample: 1}, 0, 0)
	other.Rule("api").Observe(head+"1", 1, now)
	if a, b := top[0].Keys[0].Key, other.Top(1, now)[0].Keys[0].Key; a != b {
		t.Errorf("the same long key reported as %q and %q", a, b)
	}
}

// A key the fleet finds hot is hot here too (IsHot, Keys), long or not,
// while this instance's own set keeps its hysteresis; Share hands over
// this instance's keys and keeps the fleet's set when the exchange fails.
func TestFleetHot(t *testing.T) {
	s := NewSet(Options{Sample: 1}, 0, 100)
	r := s.Rule("api")
	long := "api|3f2a91c0|" + strings.Repeat("é", 300)
	r.Hot.Update([]Key{{Key: "mine", Rate: 150}})
	var buf []byte
	text := string(appendKey(buf, long, DefaultMaxKeyBytes))
	var handed []string
	s.Share(func(rule string, local []string) ([]string, bool) {
		handed = local
		return []string{"theirs", text}, true
	})
	if strings.Join(handed, ",") != "mine" {
		t.Errorf("Share handed %q, want this instance's [mine]", handed)
	}
	for _, k := range []string{"mine", "theirs", long} {
		if !r.IsHot(k) {
			t.Errorf("IsHot(%.20q…) = false, want true", k)
		}
	}
	if r.IsHot("other") {
		t.Error("IsHot(other) = true")
	}
	if got := r.Hot.Keys(); len(got) != 3 {
		t.Errorf("Keys() = %q, want mine, theirs and the long key", got)
	}
	s.Share(func(string, []string) ([]string, bool) { return nil, false })
	if !r.IsHot("theirs") {
		t.Error("after a failed exchange: theirs no longer hot, want the fleet's set kept")
	}
	s.Share(func(string, []string) ([]string, bool) { return nil, true })
	if r.IsHot("theirs") || !r.IsHot("mine") {
		t.Error("after the fleet's set emptied: want only mine hot")
	}
}

// A key that is not UTF-8 (a header may carry any byte) is reported as
// text (Key) but shared with the fleet as its bytes (Key.Raw, Local), and
// such a key from the fleet is hot here under its own bytes: shards: auto
// rebuilds a moved key's request from what the fleet's set holds, and the
// text it was shared as before, U+FFFD and a digest, could not be.
// A key longer than MaxKeyBytes is shared as its text, bounded.
func TestRawKeyShared(t *testing.T) {
	s := NewSet(Options{Sample: 1}, 0, 100)
	r := s.Rule("api")
	now := time.Now()
	mine, theirs := "api|3f2a91c0|\xff\xfe", "api|3f2a91c0|\xfe\xff"
	long := "api|3f2a91c0|" + strings.Repeat("\xff", DefaultMaxKeyBytes)
	for range 1000 {
		r.Observe(mine, 10, now)
		r.Observe(long, 10, now)
	}
	s.Refresh(now)
	top, _ := r.Top(2, now)
	raws := map[string]string{}
	for _, k := range top {
		if !utf8.ValidString(k.Key) {
			t.Errorf("Top key %q: want valid UTF-8 text", k.Key)
		}
		raws[k.Raw] = k.Key
	}
	if len(raws) != 2 || raws[mine] == "" || raws[mine] == mine {
		t.Fatalf("Top = %+v, want %q shared as its bytes, reported as text", top, mine)
	}
	for raw, text := range raws {
		if raw != mine && (raw != text || len(raw) > DefaultMaxKeyBytes+keyText) {
			t.Errorf("the long key shared as %q (%d bytes), want its text %q", raw, len(raw), text)
		}
	}
	var handed []string
	s.Share(func(rule string, local []string) ([]string, bool) {
		handed = local
		return []string{theirs}, true
	})
	if len(handed) != 2 || !slices.Contains(handed, mine) {
		t.Errorf("Share handed %q, want %q among 2", handed, mine)
	}
	if !r.IsHot(theirs) || !r.IsHot(mine) || !r.IsHot(long) {
		t.Errorf("IsHot: theirs %v, mine %v, long %v; want all true", r.IsHot(theirs), r.IsHot(mine), r.IsHot(long))
	}
	for _, k := range r.Hot.Keys() {
		if !utf8.ValidString(k) {
			t.Errorf("Keys() has %q, want texts", k)
		}
	}
}
