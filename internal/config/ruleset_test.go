package config

import (
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/sluicehq/sluice/internal/rules"
)

// TestRuleSetCompiledOnce: the rules Parse compiled to check them are the
// Set RuleSet returns, not compiled again; a change made in Go since, to
// the rules or to the client_ip prefixes their ip keys count, is compiled.
func TestRuleSetCompiledOnce(t *testing.T) {
	cfg, err := Parse("f.yaml", []byte("rules:\n  - name: a\n    rate: 1/s\n    match: {methods: [GET]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	first, err := cfg.RuleSet()
	if err != nil {
		t.Fatal(err)
	}
	if first != cfg.set || first == nil {
		t.Fatalf("RuleSet() = %p, want the Set Parse compiled (%p)", first, cfg.set)
	}
	if again, _ := cfg.RuleSet(); again != first {
		t.Errorf("RuleSet() again = %p, want %p", again, first)
	}

	cfg.Rules[0].Match.Methods[0] = "POST"
	changed, err := cfg.RuleSet()
	if err != nil {
		t.Fatal(err)
	}
	if changed == first || changed.Rule("a").Methods[0] != "POST" {
		t.Errorf("methods changed in place: RuleSet() has %v, want [POST]", changed.Rule("a").Methods)
	}

	cfg.Rules[0].Match.Methods[0] = "GET"
	cfg.ClientIP.IPv4Prefix = 24
	if got, _ := cfg.RuleSet(); got == first {
		t.Error("client_ip.ipv4_prefix changed: RuleSet() is the Set compiled for 32")
	} else if k, _ := got.Rule("a").KeyFor(httptest.NewRequest("GET", "/", nil), netip.MustParseAddr("192.0.2.7")); k != got.Rule("a").StoreKey("192.0.2.0/24") {
		t.Errorf("ipv4_prefix 24: key %q, want the /24's", k)
	}

	cfg.Rules[0].Rate = "x"
	if _, err := cfg.RuleSet(); err == nil {
		t.Error("rate changed to x: RuleSet() compiled")
	}
	if err := cfg.Validate(); err == nil || cfg.set != nil {
		t.Errorf("Validate() = %v with a bad rate, kept Set %p; want an error and none", err, cfg.set)
	}
}

// TestRuleSetBuiltInGo: a Config built in Go has its rules compiled by
// Validate, and kept while they are unchanged.
func TestRuleSetBuiltInGo(t *testing.T) {
	cfg := &Config{}
	cfg.applyDefaults()
	if s, err := cfg.RuleSet(); err != nil || len(s.Rules) != 0 {
		t.Fatalf("RuleSet() of no rules, before Validate = %v, %v", s, err)
	}
	cfg.Rules = append(cfg.Rules, rules.Spec{Name: "a", Rate: "1/s"})
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s, _ := cfg.RuleSet()
	if s == nil || s != cfg.set {
		t.Fatalf("RuleSet() after Validate = %p, want the Set it compiled (%p)", s, cfg.set)
	}
	cfg.Rules = append(cfg.Rules, rules.Spec{Name: "b", Rate: "2/s"})
	if s2, _ := cfg.RuleSet(); s2 == s || s2.Rule("b") == nil {
		t.Errorf("a rule appended: RuleSet() lacks it")
	}
}
