package rules

import "testing"

// An ip rule's /v1/check key that is no address or prefix (a name, an
// id: "k123", as the fleet benchmark sends) costs what any rule's key
// costs, the key's one string: telling it is none takes no failed parse
// (two errors allocated per decision). Addresses and prefixes are still
// read as the rule counts them.
func TestStoreKeyNotAddressCheap(t *testing.T) {
	set := mustCompile(t,
		Spec{Name: "per-ip", Key: []string{"ip"}, Rate: "10/s"},
		Spec{Name: "per-key", Key: []string{"header:X-Api-Key"}, Rate: "10/s"})
	ip, hdr := set.Rule("per-ip"), set.Rule("per-key")
	for _, k := range []string{"k123", "user-42", "a%b", "abc/def"} {
		want := testing.AllocsPerRun(100, func() { _ = hdr.StoreKey(k) })
		if got := testing.AllocsPerRun(100, func() { _ = ip.StoreKey(k) }); got != want {
			t.Errorf("ip rule's StoreKey(%q): %v allocations, want %v (a header rule's)", k, got, want)
		}
		if got, want := ip.StoreKey(k), ip.head([]byte(k)); got != want {
			t.Errorf("ip rule's StoreKey(%q) = %q, want %q (the key as it is)", k, got, want)
		}
	}
	for _, tc := range []struct{ key, same string }{
		{"192.0.2.7", "::ffff:192.0.2.7"},
		{"2001:db8::1", "2001:db8::1/128"},
		{"192.0.2.7/32", "192.0.2.7"},
	} {
		if a, b := ip.StoreKey(tc.key), ip.StoreKey(tc.same); a != b {
			t.Errorf("StoreKey(%q) = %q, StoreKey(%q) = %q: want one counter", tc.key, a, tc.same, b)
		}
	}
}
