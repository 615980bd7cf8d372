package hotkeys

import (
	"sort"
	"sync/atomic"
	"unicode/utf8"
)

// Hot is a set of keys judged hot, with hysteresis: a key becomes hot when
// its rate is surely On or more (Key.Rate less Key.Error) and stays hot
// until its rate falls below Off. Refresh
// it from a Summary now and then (Update); Has is a lock-free lookup for
// the decision path.
//
// A key is also hot while it is in the fleet's set (SetFleet): the keys
// other instances find hot, so that every instance of a fleet shards the
// same keys.
//
// Both sets map a key's text (Key.Key, what Has looks up) to the key as
// the fleet shares it (Key.Raw: its bytes, whatever they are, up to
// MaxKeyBytes), so that a key that is not UTF-8 is shared, and carried
// across a move, as it is.
type Hot struct {
	On, Off float64                           // decisions per second; Off ≤ On
	set     atomic.Pointer[map[string]string] // this instance's
	fleet   atomic.Pointer[map[string]string] // the fleet's, from SetFleet
	maxKey  int                               // the summary's MaxKeyBytes; 0: the default
}

// Has reports whether key is hot, key written as Top reports it (see
// Options.MaxKeyBytes); Rule.IsHot takes a key as it is.
func (h *Hot) Has(key string) bool {
	for _, p := range [2]*atomic.Pointer[map[string]string]{&h.set, &h.fleet} {
		if m := p.Load(); m != nil {
			if _, ok := (*m)[key]; ok {
				return true
			}
		}
	}
	return false
}

// hasBytes is Has for a key in a byte slice, without converting it.
func (h *Hot) hasBytes(key []byte) bool {
	for _, p := range [2]*atomic.Pointer[map[string]string]{&h.set, &h.fleet} {
		if m := p.Load(); m != nil {
			if _, ok := (*m)[string(key)]; ok {
				return true
			}
		}
	}
	return false
}

// empty reports whether no key is hot.
func (h *Hot) empty() bool {
	m, f := h.set.Load(), h.fleet.Load()
	return (m == nil || len(*m) == 0) && (f == nil || len(*f) == 0)
}

// Update recomputes this instance's set from top (Top's keys, any order),
// returning its texts, sorted. A key becomes hot when its rate is surely On or
// more (Rate less Error: a key new to a full stripe inherits the count of
// the key it replaced, so a key seen once in a flood of distinct keys may
// read as fast as any), and stays hot while its Rate is Off or more.
//
// A rule with no hot key, the common case, costs nothing each time: its
// set is then noKeys, shared, and Update allocates nothing.
func (h *Hot) Update(top []Key) []string {
	old := h.set.Load()
	var m map[string]string
	for _, k := range top {
		was := false
		if old != nil {
			_, was = (*old)[k.Key]
		}
		if k.Rate-k.Error >= h.On || was && k.Rate >= h.Off {
			if m == nil {
				m = make(map[string]string)
			}
			raw := k.Raw
			if raw == "" {
				raw = k.Key
			}
			m[k.Key] = raw
		}
	}
	if m == nil {
		h.set.Store(&noKeys)
		return []string{}
	}
	return h.store(m)
}

// store makes m this instance's set (in a variable of its own: taking the
// address of Update's m would move it to the heap on every call).
func (h *Hot) store(m map[string]string) []string {
	h.set.Store(&m)
	return sorted(&m)
}

// noKeys is the set of a rule with no hot key, shared by all: a set
// stored is never written to.
var noKeys = map[string]string{}

// Local returns the keys this instance finds hot as the fleet shares them
// (Key.Raw), sorted.
func (h *Hot) Local() []string {
	m := h.set.Load()
	if m == nil {
		return nil
	}
	out := make([]string, 0, len(*m))
	for _, raw := range *m {
		out = append(out, raw)
	}
	sort.Strings(out)
	return out
}

// SetFleet replaces the fleet's set: keys as the fleet shares them
// (Key.Raw: a key's bytes, or the text of one longer than MaxKeyBytes).
func (h *Hot) SetFleet(keys []string) {
	maxKey := h.maxKey
	if maxKey <= 0 {
		maxKey = DefaultMaxKeyBytes
	}
	m := make(map[string]string, len(keys))
	for _, k := range keys {
		text := k
		if len(k) <= maxKey && !utf8.ValidString(k) {
			text = string(appendKey(nil, k, maxKey))
		}
		m[text] = k
	}
	h.fleet.Store(&m)
}

// Keys returns the texts of the hot keys, this instance's and the
// fleet's, sorted.
func (h *Hot) Keys() []string {
	m, f := h.set.Load(), h.fleet.Load()
	if f == nil || len(*f) == 0 {
		return sorted(m)
	}
	u := make(map[string]string, len(*f))
	for k := range *f {
		u[k] = ""
	}
	if m != nil {
		for k := range *m {
			u[k] = ""
		}
	}
	return sorted(&u)
}

// sorted returns m's keys (texts), sorted.
func sorted(m *map[string]string) []string {
	if m == nil {
		return nil
	}
	out := make([]string, 0, len(*m))
	for k := range *m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// IsHot reports whether key is in the rule's hot set. A key longer than
// MaxKeyBytes, or not UTF-8, is hot under the text the summary keeps and
// reports it as, which IsHot computes (Hot.Has would not find it).
func (r *Rule) IsHot(key string) bool {
	if r.Hot.empty() {
		return false
	}
	if len(key) <= r.maxKey && utf8.ValidString(key) {
		return r.Hot.Has(key)
	}
	var buf [DefaultMaxKeyBytes + keyText]byte
	return r.Hot.hasBytes(appendKey(buf[:0], key, r.maxKey))
}
