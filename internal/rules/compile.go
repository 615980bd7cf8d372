package rules

import (
	"net/http"
	"net/netip"
)

// Compile checks specs and compiles them, in order. file names the config
// file in errors. The error, if any, is ParseErrors listing every problem.
func Compile(file string, specs []Spec) (*Set, error) {
	// TODO
	return &Set{}, nil
}

// Matches reports whether the rule applies to a request with this method
// and path.
func (r *Rule) Matches(method, path string) bool {
	// TODO
	return false
}

// KeyFor returns the store key req is counted under, or ok=false when a
// key part is missing and the rule does not apply.
func (r *Rule) KeyFor(req *http.Request, clientIP netip.Addr) (key string, ok bool) {
	// TODO
	return "", false
}

// StoreKey returns the store key for a caller-given key (POST /v1/check).
func (r *Rule) StoreKey(key string) string {
	// TODO
	return key
}

// Match appends to dst every rule that applies to req, with its key.
func (s *Set) Match(req *http.Request, clientIP netip.Addr, dst []Match) []Match {
	// TODO
	return dst
}
