package config

import (
	"errors"
	"strconv"

	"github.com/sluicehq/sluice/internal/rules"
)

// checkRules compiles the rules (rules.Spec holds the keys of a rule and
// rules.Compile checks them), keeping the Set for RuleSet, and checks what
// depends on the rest of the config: the fleet options need the Redis
// store.
func (c *Config) checkRules(ck *checker) {
	set, err := c.RuleSet()
	c.set = set // nil when they do not compile
	if err != nil {
		var pe rules.ParseErrors
		if errors.As(err, &pe) {
			ck.errs = append(ck.errs, pe...)
		} else {
			ck.fail("rules", "%v", err)
		}
	}
	redis := c.Store.Type == StoreRedis
	for i := range c.Rules {
		sp := &c.Rules[i]
		if sp.Action == "defer" && c.Proxy == nil {
			key, line := ruleKey(i, sp, "action")
			ck.errs = append(ck.errs, &rules.ParseError{File: c.File, Line: line, Key: key,
				Msg: "action: defer needs a proxy block: deferred requests are replayed to proxy.upstream"})
		}
		need := func(k, what string) {
			key, line := ruleKey(i, sp, k)
			ck.errs = append(ck.errs, &rules.ParseError{File: c.File, Line: line, Key: key, Msg: what + " needs store.type: redis"})
		}
		if redis {
			continue
		}
		if sp.Sync > 0 {
			need("sync", "sync (a soft limit)")
		}
		if !sp.Lease.IsZero() {
			need("lease", "lease (a hard limit)")
		}
		if !sp.Shards.IsZero() {
			need("shards", "shards (splitting a key over Redis keys)")
		}
		if sp.Action == "defer" {
			need("action", "action: defer (a Redis Stream)")
		}
	}
}

// ruleKey returns the key path of key k of rule i and its line (the rule's
// when k was not written).
func ruleKey(i int, sp *rules.Spec, k string) (string, int) {
	key := "rules[" + strconv.Itoa(i) + "]." + k
	if l := sp.Lines[k]; l > 0 {
		return key, l
	}
	return key, sp.Line
}
