package main

import (
	"fmt"
	"strings"
)

// modes are the rule variants, by rule-name suffix and fleet option.
var modes = []struct{ name, option string }{
	{"plain", ""},
	{"sync", "    sync: 100ms\n"},
	{"lease", "    lease: auto\n"},
}

// overloadRate is the limit of the overload rules: far below what the
// clients ask of one hot key, so most answers are refusals.
const overloadRate = 2000

// config is the one config of the three instances: per mode a generous
// rule (<mode>) and an overload rule (<mode>-over).
func config(listen string, redis []string, cluster bool) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: %s\nlog_level: warn\nstore:\n  type: redis\n  redis:\n    addrs: [%s]\n    cluster: %v\n    timeout: 1s\nrules:\n", listen, strings.Join(redis, ", "), cluster)
	// The throughput rules name themselves in /v1/check; their match
	// keeps them off the forward-auth requests of the bound run.
	for _, m := range modes {
		fmt.Fprintf(&b, "  - name: %s\n    match: {path: /cells}\n    key: [ip]\n    rate: 100000000/s\n    algorithm: token_bucket\n%s", m.name, m.option)
		fmt.Fprintf(&b, "  - name: %s-over\n    match: {path: /cells}\n    key: [ip]\n    rate: %d/s\n    algorithm: token_bucket\n%s", m.name, overloadRate, m.option)
	}
	fmt.Fprintf(&b, "  - name: bound\n    match: {path: /bound}\n    key: [\"header:X-Run\"]\n    rate: %d/m\n    algorithm: fixed_window\n    sync: %v\n", boundLimit, boundSync)
	return []byte(b.String())
}
