package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// bigConfig returns a config of n rules of mixed match blocks, key parts,
// algorithms and actions, about 165 bytes a rule: 25,000 rules make a
// file just under MaxConfigBytes.
func bigConfig(n int) []byte {
	var b strings.Builder
	b.WriteString("listen: 127.0.0.1:8080\nrules:\n")
	algs := []string{"token_bucket", "gcra", "fixed_window", "sliding_window_counter", "sliding_window_log", "leaky_bucket"}
	keys := []string{"[ip]", "[header:X-Api-Key, method]", "[query:user, path]", "[cookie:session]", "[header:X-Tenant, ip]"}
	actions := []string{"reject", "shadow", "reject", "delay"}
	for i := range n {
		fmt.Fprintf(&b, "  - name: rule-%05d\n    match: {methods: [GET, POST], path: /v1/r%05d/*}\n    key: %s\n    rate: %d/s\n    algorithm: %s\n    action: %s\n",
			i, i, keys[i%len(keys)], 10+i%90, algs[i%len(algs)], actions[i%len(actions)])
	}
	return []byte(b.String())
}

// TestConfigManyRules: a config just under MaxConfigBytes, of 25,000 rules
// and no aliases, is read whole. The value budget bounds what aliases add,
// not the values a file holds itself, which its size bounds.
func TestConfigManyRules(t *testing.T) {
	data := bigConfig(25000)
	if len(data) > MaxConfigBytes {
		t.Fatalf("bigConfig(25000) is %d bytes, over MaxConfigBytes %d", len(data), MaxConfigBytes)
	}
	cfg, err := Parse("big.yaml", data)
	if err != nil {
		var ces Errors
		errors.As(err, &ces)
		t.Fatalf("Parse(25,000 rules, %d bytes): %d problems, first %v; want none", len(data), len(ces), ces[0])
	}
	if got := len(cfg.Rules); got != 25000 {
		t.Fatalf("Parse(25,000 rules): %d rules", got)
	}
	if got, want := cfg.Line("rules[24999].algorithm"), 7+6*24999; got != want {
		t.Errorf("Line(rules[24999].algorithm) = %d, want %d", got, want)
	}
}

func BenchmarkParseLarge(b *testing.B) {
	data := bigConfig(25000)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("big.yaml", data); err != nil {
			b.Fatal(err)
		}
	}
}

// longLists returns a config of one rule whose match.methods and key list
// n different items each.
func longLists(n int) []byte {
	var b strings.Builder
	b.WriteString("rules:\n  - name: a\n    rate: 1/s\n    match: {methods: [")
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "M%d", i)
	}
	b.WriteString("]}\n    key: [")
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "header:X-%d", i)
	}
	b.WriteString("]\n")
	return []byte(b.String())
}

// BenchmarkParseLongLists reads lists far past their bounds
// (rules.MaxMethods, rules.MaxKeyParts), refused with a problem each.
func BenchmarkParseLongLists(b *testing.B) {
	data := longLists(10000)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		_, err := Parse("lists.yaml", data)
		var es Errors
		if !errors.As(err, &es) || len(es) != 2 {
			b.Fatalf("Parse(lists of 10,000) = %v, want the 2 problems of too long lists", err)
		}
	}
}

func BenchmarkParseManyProblems(b *testing.B) {
	// Every rule has a value of the wrong type and a bad rate: the
	// problems of validation are weighed against those of decoding.
	data := []byte(strings.ReplaceAll(string(bigConfig(5000)), "/s\n", "/q\n    burst: x\n"))
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("problems.yaml", data); err == nil {
			b.Fatal("Parse: no problems")
		}
	}
}
