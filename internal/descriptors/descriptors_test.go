package descriptors

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/rules"
)

func mustParse(t *testing.T, src string) *Set {
	t.Helper()
	s, err := Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return s
}

func es(kv ...string) []Entry {
	out := make([]Entry, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, Entry{kv[i], kv[i+1]})
	}
	return out
}

// lookup returns the matched rule's path, or "" when no limit applies.
func lookupPath(t *testing.T, s *Set, domain string, e []Entry) (string, *Match) {
	t.Helper()
	var m Match
	s.Lookup(domain, e, &m)
	if m.Rule == nil {
		return "", &m
	}
	return m.Rule.Path, &m
}

const messaging = `
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
`

func TestLookupLevels(t *testing.T) {
	s := mustParse(t, messaging)
	for _, tc := range []struct {
		name string
		e    []Entry
		want string
	}{
		{"nested key without value", es("message_type", "marketing", "to_number", "2061111111"), "message_type_marketing.to_number"},
		{"top-level key without value", es("to_number", "2061111111"), "to_number"},
		{"placeholder has no limit", es("message_type", "marketing"), ""},
		{"other value of the placeholder", es("message_type", "transactional", "to_number", "1"), ""},
		{"deeper than the config", es("to_number", "1", "x", "y"), ""},
		{"unknown key", es("nope", "1"), ""},
	} {
		got, _ := lookupPath(t, s, "messaging", tc.e)
		if got != tc.want {
			t.Errorf("%s: Lookup(%v) = %q, want %q", tc.name, tc.e, got, tc.want)
		}
	}
	var m Match
	if s.Lookup("other", es("to_number", "1"), &m) || m.Rule != nil {
		t.Errorf("Lookup(unknown domain) = known, rule %v; want unknown, nil", m.Rule)
	}
}

func TestLookupValueBeforeKey(t *testing.T) {
	s := mustParse(t, `
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
`)
	got, m := lookupPath(t, s, "edge_proxy_per_ip", es("remote_address", "50.0.0.5"))
	if got != "remote_address_50.0.0.5" || m.Rule.RequestsPerUnit != 0 {
		t.Errorf("Lookup(50.0.0.5) = %q (%d/s), want the blocking remote_address_50.0.0.5", got, m.Rule.RequestsPerUnit)
	}
	got, m = lookupPath(t, s, "edge_proxy_per_ip", es("remote_address", "50.0.0.1"))
	if got != "remote_address" || m.Rule.RequestsPerUnit != 10 {
		t.Errorf("Lookup(50.0.0.1) = %q, want remote_address at 10/s", got)
	}
	// A rule without a value counts each value apart.
	a, b := es("remote_address", "1.1.1.1"), es("remote_address", "2.2.2.2")
	_, ma := lookupPath(t, s, "edge_proxy_per_ip", a)
	_, mb := lookupPath(t, s, "edge_proxy_per_ip", b)
	if ma.StoreKey(a) == mb.StoreKey(b) {
		t.Errorf("two values of a value-less rule share the store key %q", ma.StoreKey(a))
	}
}

func TestLookupWildcards(t *testing.T) {
	s := mustParse(t, `
domain: w
descriptors:
  - key: key1
    value: value*
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: path
    value: /api/*/action
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: route
    value: /api/*/resource/*/action
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: path
    value: /api/exact/action
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: files_no_share
    value: files_no_share/*
    rate_limit: {unit: hour, requests_per_unit: 10}
`)
	for _, tc := range []struct {
		e    []Entry
		want string
	}{
		{es("key1", "value"), "key1_value*"},
		{es("key1", "valueXYZ"), "key1_value*"},
		{es("key1", "valu"), ""},
		{es("path", "/api/123/action"), "path_/api/*/action"},
		{es("path", "/api/123/other"), ""},
		{es("path", "/api/exact/action"), "path_/api/exact/action"}, // the literal value first
		{es("route", "/api/v1/resource/123/action"), "route_/api/*/resource/*/action"},
		{es("route", "/api/v1/resource/action"), ""},
	} {
		if got, _ := lookupPath(t, s, "w", tc.e); got != tc.want {
			t.Errorf("Lookup(%v) = %q, want %q", tc.e, got, tc.want)
		}
	}
	key := func(e []Entry) string {
		_, m := lookupPath(t, s, "w", e)
		return m.StoreKey(e)
	}
	if a, b := key(es("files", "files/a.pdf")), key(es("files", "files/b.csv")); a != b {
		t.Errorf("share_threshold: files/a.pdf counts under %q, files/b.csv under %q; want one counter", a, b)
	}
	// A value too long to keep raw still counts in the shared counter:
	// whether a key is hashed depends on what it holds (the pattern), not
	// on the value it stands for, or long values would have a counter of
	// their own beside the short ones'.
	if a, b := key(es("files", "files/a.pdf")), key(es("files", "files/"+strings.Repeat("x", 2*MaxKeyLen))); a != b {
		t.Errorf("share_threshold: files/a.pdf counts under %q, a %d-byte value under %q; want one counter", a, 2*MaxKeyLen, b)
	}
	if a, b := key(es("files_no_share", "files_no_share/a.pdf")), key(es("files_no_share", "files_no_share/b.csv")); a == b {
		t.Errorf("without share_threshold both values count under %q; want one counter each", a)
	}
}

func TestMatchWildcard(t *testing.T) {
	for _, tc := range []struct {
		pat, v string
		want   bool
	}{
		{"a*", "a", true}, {"a*", "abc", true}, {"a*", "b", false},
		{"*", "", true}, {"*x*", "x", true}, {"*x*", "y", false},
		{"a*b*c", "abc", true}, {"a*b*c", "ac", false}, {"a*b*c", "aXbYc", true},
		{"ab*ba", "aba", false}, // prefix and suffix must not overlap
		{"a**b", "ab", true}, {"lit", "lit", true}, {"lit", "litx", false},
	} {
		if got := matchWildcard(strings.Split(tc.pat, "*"), tc.v); got != tc.want {
			t.Errorf("matchWildcard(%q, %q) = %v, want %v", tc.pat, tc.v, got, tc.want)
		}
	}
}

func TestLookupMetricLabels(t *testing.T) {
	s := mustParse(t, `
domain: example10
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: minute, requests_per_unit: 60}
  - key: key1
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 10}
`)
	for _, tc := range []struct {
		e        []Entry
		want     string
		detailed bool
	}{
		{es("route", "api", "http_method", "GET", "subject_id", "123"), "route_api.http_method_GET.subject_id", true},
		{es("key1", "unspecified"), "key1_unspecified", true},
		{es("plain", "x"), "plain", false},
	} {
		_, m := lookupPath(t, s, "example10", tc.e)
		if m.Metric != tc.want || m.Detailed != tc.detailed {
			t.Errorf("Lookup(%v).Metric = %q (detailed %v), want %q (%v)", tc.e, m.Metric, m.Detailed, tc.want, tc.detailed)
		}
	}
}

func TestRuleFields(t *testing.T) {
	s := mustParse(t, `
domain: d
descriptors:
  - key: a
    algorithm: token_bucket
    burst: 20
    shadow_mode: true
    rate_limit: {unit: week, requests_per_unit: 10, name: wk}
  - key: b
    quota_mode: true
    sync: 50ms
    shards: 4
    rate_limit: {unit: MONTH, requests_per_unit: 3, replaces: [{name: wk}]}
  - key: l
    lease: 10
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: h
    shards: auto
    rate_limit: {unit: second, requests_per_unit: 1000}
  - key: c
    rate_limit: {unlimited: true}
  - key: y
    rate_limit: {unit: year, requests_per_unit: 1}
`)
	_, m := lookupPath(t, s, "d", es("a", "1"))
	r := m.Rule
	if r.Algorithm != sluice.TokenBucket || r.Limit != (sluice.Limit{Rate: 10, Period: 7 * 24 * time.Hour, Burst: 20}) || !r.Shadow || r.Name != "wk" {
		t.Errorf("rule a = %+v, want token_bucket 10/week burst 20, shadow, named wk", r)
	}
	_, m = lookupPath(t, s, "d", es("b", "1"))
	r = m.Rule
	if r.Algorithm != sluice.FixedWindow || r.Limit.Period != 30*24*time.Hour || !r.Quota || r.Sync != 50*time.Millisecond || r.Shards.N != 4 || len(r.Replaces) != 1 || r.Replaces[0] != "wk" {
		t.Errorf("rule b = %+v, want fixed_window per 30 days, quota, sync 50ms, 4 shards, replaces wk", r)
	}
	if _, m := lookupPath(t, s, "d", es("l", "1")); m.Rule.Lease != (rules.AutoCount{N: 10}) {
		t.Errorf("rule l lease = %v, want 10", m.Rule.Lease)
	}
	if _, m := lookupPath(t, s, "d", es("h", "1")); m.Rule.Shards != (rules.AutoCount{Auto: true}) || m.Rule.FullName() != "envoy/d/h" {
		t.Errorf("rule h shards = %v, name %q; want auto, envoy/d/h", m.Rule.Shards, m.Rule.FullName())
	}
	_, m = lookupPath(t, s, "d", es("c", "1"))
	if !m.Rule.Unlimited {
		t.Errorf("rule c = %+v, want unlimited", m.Rule)
	}
	_, m = lookupPath(t, s, "d", es("y", "1"))
	if m.Rule.Limit.Period != 365*24*time.Hour {
		t.Errorf("year = %v, want 365 days", m.Rule.Limit.Period)
	}
}

func TestStoreKeyChangesWithLimit(t *testing.T) {
	one := mustParse(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	two := mustParse(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2}\n")
	also := mustParse(t, "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: true\n    rate_limit: {unit: second, requests_per_unit: 1, name: n}\n")
	e := es("k", "v")
	_, m1 := lookupPath(t, one, "d", e)
	_, m2 := lookupPath(t, two, "d", e)
	_, m3 := lookupPath(t, also, "d", e)
	if m1.StoreKey(e) == m2.StoreKey(e) {
		t.Errorf("1/s and 2/s share the store key %q", m1.StoreKey(e))
	}
	if m1.StoreKey(e) != m3.StoreKey(e) {
		t.Errorf("adding a name and shadow_mode changed the store key %q -> %q; counters would reset", m1.StoreKey(e), m3.StoreKey(e))
	}
	// Length prefixes: no spelling of keys and values collides.
	a, b := es("k", "v1:k"), es("k", "v1", "k", "")
	if storeKey("h", a, nil) == storeKey("h", b, nil) {
		t.Errorf("storeKey(%v) == storeKey(%v)", a, b)
	}
	long := es("k", strings.Repeat("x", 4*MaxKeyLen))
	if k := m1.StoreKey(long); len(k) > MaxKeyLen+200 {
		t.Errorf("StoreKey of a %d-byte value is %d bytes long, want it hashed", 4*MaxKeyLen, len(k))
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string // substrings, each of one error line, in order
	}{
		{"unknown key", "domain: d\ndescriptors:\n  - key: k\n    rate_limt: {}\n", []string{"test.yaml:4: descriptors[0].rate_limt: unknown key"}},
		{"invisible character in a key", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {\"unit\u200b\": second, requests_per_unit: 1}\n", []string{`test.yaml:4: descriptors[0].rate_limit."unit\u200b": unknown key: it holds an invisible character, U+200B (did you mean "unit"?)`, "rate_limit.unit: missing"}},
		{"unknown rate_limit key", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 2}\n", []string{"test.yaml:4: descriptors[0].rate_limit.burst: unknown key"}},
		{"bad unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n", []string{`test.yaml:5: descriptors[0].rate_limit.unit: unknown unit "fortnight"`}},
		{"missing unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}\n", []string{"test.yaml:4: descriptors[0].rate_limit.unit: missing"}},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n", []string{"descriptors[0].rate_limit.unit: an unlimited rate_limit takes no unit"}},
		{"negative", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n", []string{"requests_per_unit: -1 is out of range"}},
		// Past int64, YAML takes them for floats: still whole numbers, too large.
		{"huge", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 99999999999999999999}\n", []string{"test.yaml:4: descriptors[0].rate_limit.requests_per_unit: 99999999999999999999 is too large (at most 9223372036854775807)"}},
		{"huge negative", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -99999999999999999999}\n", []string{"requests_per_unit: -99999999999999999999 is too small (at least -9223372036854775808)"}},
		{"huge burst", "domain: d\ndescriptors:\n  - key: k\n    algorithm: token_bucket\n    burst: 1_000_000_000_000_000_000_000\n    rate_limit: {unit: second, requests_per_unit: 1}\n", []string{"test.yaml:5: descriptors[0].burst: 1_000_000_000_000_000_000_000 is too large"}},
		{"huge segments", "domain: d\ndescriptors:\n  - key: k\n    algorithm: sliding_window_counter\n    segments: 99999999999\n    rate_limit: {unit: second, requests_per_unit: 1}\n", []string{"test.yaml:5: descriptors[0].segments: 99999999999 is too large (at most 2147483647)"}},
		{"huge sync", "domain: d\ndescriptors:\n  - key: k\n    sync: 99999999999999h\n    rate_limit: {unit: second, requests_per_unit: 1}\n", []string{`test.yaml:4: descriptors[0].sync: "99999999999999h" is too large (at most 2562047h47m16.854775807s)`}},
		// A value that does not decode is told once, not again as the zero it left.
		{"sync a list", "domain: d\ndescriptors:\n  - key: k\n    sync: [1]\n    rate_limit: {unit: second, requests_per_unit: 1}\n", []string{"test.yaml:4: descriptors[0].sync: want a duration such as 50ms, not a list"}},
		{"algorithm a list", "domain: d\ndescriptors:\n  - key: k\n    algorithm: [sliding_window_counter]\n    segments: 4\n    rate_limit: {unit: second, requests_per_unit: 1}\n", []string{"test.yaml:4: descriptors[0].algorithm: want a string, not a list"}},
		{"burst a string", "domain: d\ndescriptors:\n  - key: k\n    algorithm: gcra\n    burst: lots\n    rate_limit: {unit: second, requests_per_unit: 1}\n", []string{`test.yaml:5: descriptors[0].burst: want a whole number, not the string "lots"`}},
		{"segments after an unknown algorithm", "domain: d\ndescriptors:\n  - key: k\n    algorithm: sliding-window-counter\n    segments: 4\n    sync: 10ms\n    rate_limit: {unit: second, requests_per_unit: 1}\n", []string{`test.yaml:4: descriptors[0].algorithm: unknown algorithm "sliding-window-counter"`}},
		{"unit a list", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: [second], requests_per_unit: 1}\n", []string{"test.yaml:4: descriptors[0].rate_limit.unit: want a string, not a list"}},
		{"replaced name a list", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: [a]}]}\n", []string{"test.yaml:4: descriptors[0].rate_limit.replaces[0].name: want a string, not a list"}},
		{"key a list", "domain: d\ndescriptors:\n  - key: [k]\n    rate_limit: {unit: second, requests_per_unit: 1}\n", []string{"test.yaml:3: descriptors[0].key: want a string, not a list"}},
		{"key empty", "domain: d\ndescriptors:\n  - key: ''\n", []string{"test.yaml:3: descriptors[0].key: must not be empty: every descriptor needs a key"}},
		{"lease a list", "domain: d\ndescriptors:\n  - key: k\n    lease: [1]\n    rate_limit: {unit: second, requests_per_unit: 1}\n", []string{"test.yaml:4: descriptors[0].lease: want a string, not a list"}},
		{"shards a list", "domain: d\ndescriptors:\n  - key: k\n    shards: [2]\n    rate_limit: {unit: second, requests_per_unit: 1}\n", []string{"test.yaml:4: descriptors[0].shards: want a string, not a list"}},
		{"list holding itself", "domain: d\ndescriptors: &a\n  - key: k\n    descriptors: *a\n", []string{"test.yaml:4: descriptors[0].descriptors: the alias *a is the list of descriptors that holds it: a descriptor cannot hold itself"}},
		{"descriptor holding itself", "domain: d\ndescriptors:\n  - &a\n    key: k\n    descriptors: [*a]\n", []string{"test.yaml:5: descriptors[0].descriptors[0]: the alias *a is the descriptor that holds it: a descriptor cannot hold itself"}},
		{"not a whole number", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1.5}\n", []string{"requests_per_unit: want a whole number, not the number 1.5"}},
		{"not a number", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: lots}\n", []string{`requests_per_unit: want a whole number, not the string "lots"`}},
		{"missing key", "domain: d\ndescriptors:\n  - value: v\n", []string{"test.yaml:3: descriptors[0].key: missing"}},
		{"duplicate", "domain: d\ndescriptors:\n  - key: k\n  - key: k\n", []string{"test.yaml:4: descriptors[1]: duplicate descriptor \"k\""}},
		{"share without wildcard", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n", []string{"share_threshold: only applies to a wildcard value"}},
		{"replaces itself", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: a, replaces: [{name: a}]}\n", []string{"cannot replace itself"}},
		{"empty replaces", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{}]}\n", []string{"replaces[0].name: missing"}},
		{"bad algorithm", "domain: d\ndescriptors:\n  - key: k\n    algorithm: fastest\n    rate_limit: {unit: second, requests_per_unit: 1}\n", []string{`test.yaml:4: descriptors[0].algorithm: unknown algorithm "fastest"`}},
		{"options without limit", "domain: d\ndescriptors:\n  - key: k\n    burst: 3\n", []string{"belong with a rate_limit"}},
		{"burst on a window", "domain: d\ndescriptors:\n  - key: k\n    burst: 3\n    rate_limit: {unit: second, requests_per_unit: 1}\n", []string{`test.yaml:4: descriptors[0].burst: 3 applies to token_bucket, gcra and leaky_bucket only: fixed_window admits the rate, 1, each period`}},
		{"bad lease", "domain: d\ndescriptors:\n  - key: k\n    lease: some\n    rate_limit: {unit: second, requests_per_unit: 1}\n", []string{`lease: want auto or a whole number`}},
		{"sync on the sliding log", "domain: d\ndescriptors:\n  - key: k\n    algorithm: sliding_window_log\n    sync: 10ms\n    rate_limit: {unit: second, requests_per_unit: 1}\n", []string{`test.yaml:5: descriptors[0].sync: sliding_window_log cannot be counted by a fleet`}},
		{"lease on a 4-segment counter", "domain: d\ndescriptors:\n  - key: k\n    algorithm: sliding_window_counter\n    segments: 4\n    lease: auto\n    rate_limit: {unit: second, requests_per_unit: 1}\n", []string{`test.yaml:6: descriptors[0].lease: sliding_window_counter cannot be counted by a fleet`}},
		{"one shard", "domain: d\ndescriptors:\n  - key: k\n    shards: 1\n    rate_limit: {unit: second, requests_per_unit: 1}\n", []string{`test.yaml:4: descriptors[0].shards: want auto or a whole number between 2 and 1024, not "1"`}},
		{"shards word", "domain: d\ndescriptors:\n  - key: k\n    shards: many\n    rate_limit: {unit: second, requests_per_unit: 1}\n", []string{`test.yaml:4: descriptors[0].shards: want auto or a whole number between 2 and 1024, not "many"`}},
		{"too many shards", "domain: d\ndescriptors:\n  - key: k\n    shards: 5000\n    rate_limit: {unit: second, requests_per_unit: 1}\n", []string{`test.yaml:4: descriptors[0].shards: want auto or a whole number between 2 and 1024, not "5000"`}},
		{"sync and lease", "domain: d\ndescriptors:\n  - key: k\n    sync: 10ms\n    lease: auto\n    rate_limit: {unit: second, requests_per_unit: 1}\n", []string{`test.yaml:5: descriptors[0].lease: sync (soft) and lease (hard) exclude each other`}},
		{"no domain", "descriptors: []\n", []string{"domain: missing"}},
		{"empty domain", "domain: ''\n", []string{"domain: must not be empty"}},
		{"empty file", "", []string{"test.yaml:1: empty file"}},
		{"two documents", "domain: a\n---\ndomain: b\n", []string{"test.yaml:2: more than one YAML document"}},
		{"syntax", "domain: [\n", []string{"YAML syntax"}},
		{"parser error line", "domain: d\ndescriptors:\n  - key: k\n    value: [a, b\n    rate_limit: {unit: second, requests_per_unit: 1}\n", []string{"test.yaml:4: YAML syntax: did not find expected ',' or ']'"}},
		{"latin-1 byte", "domain: d\ndescriptors:\n  - key: k\n    value: caf\xe9\n", []string{"test.yaml:4: YAML syntax: byte 0xE9 at column 15 is not UTF-8"}},
		{"NUL of a file cut short", "domain: d\ndescriptors:\n  - key: k\n\x00\x00\x00", []string{"test.yaml:4: YAML syntax: control character U+0000 at column 1 is not allowed"}},
		{"not a mapping", "- a\n", []string{"want a mapping"}},
		{"nested error", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: second}\n", []string{"test.yaml:6: descriptors[0].descriptors[0].rate_limit.requests_per_unit: missing"}},
		{"two errors", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: yes please\n  - key: b\n    quota_mode: 1\n", []string{"test.yaml:4: descriptors[0].shadow_mode: want true or false", "test.yaml:6: descriptors[1].quota_mode: want true or false"}},
	} {
		_, err := Parse("test.yaml", []byte(tc.src))
		if err == nil {
			t.Errorf("%s: Parse succeeded, want errors %q", tc.name, tc.want)
			continue
		}
		var pe rules.ParseErrors
		if !errors.As(err, &pe) {
			t.Errorf("%s: error %T is not rules.ParseErrors", tc.name, err)
		}
		lines := strings.Split(err.Error(), "\n")
		if len(lines) != len(tc.want) {
			t.Errorf("%s: %d errors, want %d:\n%v", tc.name, len(lines), len(tc.want), err)
			continue
		}
		for i, w := range tc.want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("%s: error %d = %q, want it to contain %q", tc.name, i, lines[i], w)
			}
		}
	}
}

func TestLoadDirectoriesAndDomains(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("conf/a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	write("conf/b.yml", "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	write("conf/notes.txt", "not yaml at all: [")
	write("conf/..data/hidden.yaml", "garbage: [")
	single := write("c.yaml", "domain: c\n")
	s, err := Load([]string{filepath.Join(dir, "conf"), single})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if s.Domains() != 3 || s.Rules() != 2 || !s.HasDomain("a") || !s.HasDomain("b") || !s.HasDomain("c") {
		t.Errorf("Load: %d domains, %d rules (%v); want a, b, c and 2 rules", s.Domains(), s.Rules(), s.Files())
	}

	dup := write("dup.yaml", "domain: a\n")
	_, err = Load([]string{filepath.Join(dir, "conf"), dup})
	if err == nil || !strings.Contains(err.Error(), "dup.yaml:1: domain: domain \"a\" is already configured in") {
		t.Errorf("Load with a domain twice: %v, want an error naming dup.yaml:1", err)
	}
	bad := write("bad.yaml", "domain: x\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, extra: 1}\n")
	_, err = Load([]string{single, bad, filepath.Join(dir, "missing.yaml")})
	if err == nil || !strings.Contains(err.Error(), "bad.yaml:4: descriptors[0].rate_limit.extra: unknown key") ||
		!strings.Contains(err.Error(), "missing.yaml: no such file or directory") {
		t.Errorf("Load with a bad file and a missing one: %v, want both named", err)
	}
}

func TestOverride(t *testing.T) {
	r, ok := Override("d", 7, Minute, 0)
	if !ok || r.Algorithm != sluice.FixedWindow || r.Limit != sluice.PerMinute(7) || r.Shadow {
		t.Fatalf("Override(7/minute) = %+v, %v", r, ok)
	}
	if _, ok := Override("d", 7, 0, 1); ok {
		t.Errorf("Override with unit 0 succeeded")
	}
	if r, ok := Override("d", 7, Second, 30); !ok || r.Limit.Period != 30*time.Second {
		t.Errorf("Override(7 per 30 seconds) = %+v, %v; want a 30s period", r, ok)
	}
	m := OverrideMatch(r, es("a", "1", "b", ""))
	if m.Metric != "a_1.b" || !m.Detailed {
		t.Errorf("OverrideMatch metric = %q, want a_1.b (detailed)", m.Metric)
	}
}

func TestEachAndDigest(t *testing.T) {
	s := mustParse(t, messaging)
	var paths []string
	s.Each(func(r *Rule) { paths = append(paths, r.Path) })
	if strings.Join(paths, " ") != "message_type_marketing.to_number to_number" {
		t.Errorf("Each visited %v, want both rules in config order", paths)
	}
	if s.Digest() == mustParse(t, messaging+"\n").Digest() || s.Digest() != mustParse(t, messaging).Digest() {
		t.Errorf("Digest does not follow the content")
	}
}

// TestLookupKeyWithNUL: an entry's key is matched as a whole, however
// its bytes read: a key holding a NUL byte is not taken for a key and a
// value of the config ("remote_address\x00blocked" is not remote_address
// with value blocked), in a request or in the config.
func TestLookupKeyWithNUL(t *testing.T) {
	s := mustParse(t, `
domain: d
descriptors:
  - key: remote_address
    value: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: "user\x00vip"
    rate_limit: {unit: second, requests_per_unit: 7}
`)
	for _, tc := range []struct {
		name string
		e    []Entry
		want string
	}{
		{"key and value", es("remote_address", "blocked"), "remote_address_blocked"},
		{"a request's key holding the value", es("remote_address\x00blocked", "x"), ""},
		{"a request's key holding the value, no value", es("remote_address\x00blocked", ""), ""},
		{"a config key holding a NUL, asked by key and value", es("user", "vip"), ""},
		{"a config key holding a NUL, asked by that key", es("user\x00vip", "1"), "user\x00vip"},
	} {
		if got, _ := lookupPath(t, s, "d", tc.e); got != tc.want {
			t.Errorf("%s: Lookup(%q) = %q, want %q", tc.name, tc.e, got, tc.want)
		}
	}
}
