package config

import "strings"

// redact returns s, an address or URL as the config gives it, with the
// password of its user information (user:password@) replaced by xxxxx, or
// the whole of it when it has no colon (a token@host), for problems to
// quote: they are printed by check-config and logged by every refused
// reload, and s may come from the environment (${REDIS_URL}) to keep a
// secret out of the file. Everything else is kept, for the user to
// recognise the value.
func redact(s string) string {
	start := 0
	if i := strings.Index(s, "://"); i >= 0 {
		start = i + len("://")
	}
	at := strings.LastIndexByte(s[start:], '@')
	if at < 0 {
		return s
	}
	cred, rest := s[start:start+at], s[start+at:]
	if user, _, ok := strings.Cut(cred, ":"); ok && !strings.ContainsAny(user, "/?#") {
		return s[:start] + user + ":xxxxx" + rest
	}
	if !strings.ContainsAny(cred, "/?#") {
		return s[:start] + "xxxxx" + rest
	}
	return s // an @ in a path, after no user:password
}
