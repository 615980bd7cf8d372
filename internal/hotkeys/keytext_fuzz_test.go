package hotkeys

import (
	"testing"
	"unicode/utf8"
)

// FuzzKeyShared: whatever a key's bytes, the summary reports it as valid
// UTF-8 text (Key: the key itself when it is UTF-8 and fits), shares it
// with the fleet as its bytes when it fits in MaxKeyBytes (Raw, which
// shards: auto rebuilds a request from) or as its text, at most keyText
// bytes longer, when it does not, and an instance handed that by the fleet
// finds the key itself hot.
func FuzzKeyShared(f *testing.F) {
	f.Add("api|3f2a91c0|tenant", uint8(64))
	f.Add("api|3f2a91c0|\xff\xfe", uint8(64))
	f.Add("\xff\xfe", uint8(1))
	f.Add("é\xffé", uint8(3))
	f.Add("abcdefgh", uint8(4))
	f.Add("k…0123456789abcdef", uint8(40))
	f.Fuzz(func(t *testing.T, key string, max uint8) {
		maxKey := int(max%64) + 1
		s := NewSet(Options{Sample: 1, MaxKeyBytes: maxKey}, 0, 0)
		r := s.Rule("r")
		r.Observe(key, 1, t0)
		top, _ := r.Top(1, t0)
		if len(top) != 1 {
			t.Fatalf("Top = %+v, want the key", top)
		}
		k := top[0]
		if !utf8.ValidString(k.Key) {
			t.Errorf("Key %q: not UTF-8", k.Key)
		}
		fits := len(key) <= maxKey
		if fits && utf8.ValidString(key) && k.Key != key {
			t.Errorf("Key %q, want the key %q", k.Key, key)
		}
		if fits && k.Raw != key {
			t.Errorf("Raw %q, want the key's bytes %q", k.Raw, key)
		}
		if !fits && (k.Raw != k.Key || len(k.Raw) <= maxKey || len(k.Raw) > maxKey+keyText) {
			t.Errorf("Raw %q (%d bytes), want the text %q, %d to %d bytes", k.Raw, len(k.Raw), k.Key, maxKey+1, maxKey+keyText)
		}
		other := NewSet(Options{Sample: 1, MaxKeyBytes: maxKey}, 0, 0).Rule("r")
		other.Hot.SetFleet([]string{k.Raw})
		if !other.IsHot(key) {
			t.Errorf("handed %q by the fleet: IsHot(%q) = false", k.Raw, key)
		}
		if keys := other.Hot.Keys(); len(keys) != 1 || keys[0] != k.Key {
			t.Errorf("handed %q by the fleet: Keys() = %q, want [%q]", k.Raw, keys, k.Key)
		}
	})
}
