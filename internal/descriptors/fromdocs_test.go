package descriptors_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/descriptors"
)

func TestFromDocs(t *testing.T) {
	a := descriptors.Doc{Name: "a", Data: []byte("domain: shop\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")}
	b := descriptors.Doc{Name: "b", Data: []byte("domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2}\n")}
	again := descriptors.Doc{Name: "again", Data: []byte("domain: shop\ndescriptors:\n  - key: j\n    rate_limit: {unit: hour, requests_per_unit: 3}\n")}
	bad := descriptors.Doc{Name: "bad", Data: []byte("domain: x\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 3}\n")}

	s, err := descriptors.FromDocs([]descriptors.Doc{a, b}, descriptors.LoadOptions{})
	if err != nil || s.Domains() != 2 || s.Rules() != 2 || !s.HasDomain("shop") || !s.HasDomain("edge") {
		t.Fatalf("FromDocs(a, b) = %v domains, %v rules, %v; want shop and edge, 2 rules", s.Domains(), s.Rules(), err)
	}
	if got := s.Files(); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("FromDocs(a, b).Files() = %q, want [a b]", got)
	}
	s2, _ := descriptors.FromDocs([]descriptors.Doc{a, again}, descriptors.LoadOptions{MergeDomains: true})
	if s2.Domains() != 1 || s2.Rules() != 2 {
		t.Errorf("FromDocs(a, again) merged: %d domains, %d rules; want 1, 2", s2.Domains(), s2.Rules())
	}
	if s2.Digest() == s.Digest() {
		t.Error("two different sets of docs have the same Digest")
	}
	_, err = descriptors.FromDocs([]descriptors.Doc{a, again, bad}, descriptors.LoadOptions{})
	for _, want := range []string{`again: domain: domain "shop" is already configured in a`, `bad: descriptors[0].rate_limit.unit: unknown unit "fortnight"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("FromDocs(a, again, bad) = %v, want a problem saying %q (no line)", err, want)
		}
	}
	if s, err := descriptors.FromDocs(nil, descriptors.LoadOptions{}); err != nil || s.Domains() != 0 {
		t.Errorf("FromDocs(nil) = %v domains, %v; want an empty set", s.Domains(), err)
	}
}
