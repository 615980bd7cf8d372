package rules

import (
	"slices"
	"strings"
	"testing"
)

// A cookie key part is read past net/http's cap on the cookies of a
// request (3000: Request.Cookie and CookiesNamed find none beyond it):
// padded with empty pairs, or with 3000 other cookies, the Cookie header
// still carries the key, which the app behind reads (PHP, Node, Python,
// Java have no such cap), so the request is counted under it as without
// the padding; not left uncounted, which let a client send as many
// requests under one session as it liked.
func TestCookieKeyPastGoCap(t *testing.T) {
	set := mustCompile(t, Spec{Name: "c", Rate: "1/s", Key: []string{"cookie:sid"}})
	c := set.Rules[0]
	pad := strings.Repeat(";", 3000)
	many := make([]string, 3001)
	for i := range many {
		many[i] = "Cookie: x=1"
	}
	for _, tc := range []struct {
		name    string
		headers []string
		want    []Match
	}{
		{"empty pairs after", []string{"Cookie: sid=victim" + pad}, []Match{{c, c.StoreKey("victim")}}},
		{"empty pairs before", []string{"Cookie: " + pad + " sid=\"victim\""}, []Match{{c, c.StoreKey("victim")}}},
		{"two values", []string{"Cookie: sid=a; sid=b" + pad}, []Match{{c, c.StoreKey("a")}, {c, c.StoreKey("b")}}},
		{"other cookie lines", append(many, "Cookie: sid=victim"), []Match{{c, c.StoreKey("victim")}}},
	} {
		ms, err := set.Match(request("GET", "/", tc.headers...), ip1, nil)
		if err != nil || !slices.Equal(ms, tc.want) {
			t.Errorf("%s: Match = %v, %v; want %v", tc.name, ms, err, tc.want)
		}
	}
}
