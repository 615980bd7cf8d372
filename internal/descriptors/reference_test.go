package descriptors

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadDirectoryWithoutDescriptorFiles: a listed directory in which no
// descriptor file is read is an error naming it, not a config without
// limits: the reference service reads every file of its directory and its
// subdirectories, so a directory it served may hold none that Sluice reads.
func TestLoadDirectoryWithoutDescriptorFiles(t *testing.T) {
	dir := t.TempDir()
	for name, src := range map[string]string{
		"ratelimit/config/edge.yaml": "domain: edge\n",
		"ratelimit/limits.conf":      "domain: conf\n",
		"ratelimit/.hidden.yaml":     "domain: hidden\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Load([]string{filepath.Join(dir, "ratelimit")})
	want := filepath.Join(dir, "ratelimit") + ": no descriptor file: only the *.yaml and *.yml files directly in a listed directory are read (skipped: 1 subdirectory, 1 other file)"
	if err == nil || err.Error() != want {
		t.Errorf("Load(a directory with only a subdirectory and a .conf file) = %v, want %q", err, want)
	}
	_, err = Load([]string{empty})
	if want := empty + ": no descriptor file: only the *.yaml and *.yml files directly in a listed directory are read"; err == nil || err.Error() != want {
		t.Errorf("Load(an empty directory) = %v, want %q", err, want)
	}
	s, err := Load([]string{filepath.Join(dir, "ratelimit", "config")})
	if err != nil || !s.HasDomain("edge") {
		t.Errorf("Load(the subdirectory itself) = %v, %v; want its domain", s, err)
	}
}

// TestParseAsTheReferenceReadsYAML: files the reference service loads
// (it reads them with a YAML 1.1 parser, the first document only) load
// here too, with the same meaning.
func TestParseAsTheReferenceReadsYAML(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		check     func(s *Set) string
	}{
		{"a trailing document separator", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n---\n", nil},
		{"empty documents after the first", "---\ndomain: a\n...\n---\n# nothing here\n---\n", nil},
		{"anchors and merge keys", `domain: a
descriptors:
  - &per_user
    key: user
    shadow_mode: true
    rate_limit: &minute {unit: minute, requests_per_unit: 10, name: users}
  - <<: *per_user
    key: admin
    rate_limit:
      <<: *minute
      name: admins
      requests_per_unit: 100
`, func(s *Set) string {
			var got []string
			s.Each(func(r *Rule) {
				got = append(got, fmt.Sprintf("%s %s %d/%s shadow=%t", r.Path, r.Name, r.RequestsPerUnit, r.Unit, r.Shadow))
			})
			if want := []string{"user users 10/minute shadow=true", "admin admins 100/minute shadow=true"}; fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Sprintf("rules %q, want %q", got, want)
			}
			return ""
		}},
		{"YAML 1.1 booleans", "domain: a\ndescriptors:\n  - key: s\n    shadow_mode: yes\n    rate_limit: {unit: minute, requests_per_unit: 1}\n  - key: q\n    quota_mode: On\n    detailed_metric: n\n    rate_limit: {unit: minute, requests_per_unit: 1}\n  - key: u\n    rate_limit: {unlimited: Y}\n",
			func(s *Set) string {
				var got []string
				s.Each(func(r *Rule) {
					got = append(got, fmt.Sprintf("%s shadow=%t quota=%t detailed=%t unlimited=%t", r.Path, r.Shadow, r.Quota, r.DetailedMetric, r.Unlimited))
				})
				want := []string{"s shadow=true quota=false detailed=false unlimited=false", "q shadow=false quota=true detailed=false unlimited=false", "u shadow=false quota=false detailed=false unlimited=true"}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					return fmt.Sprintf("rules %q, want %q", got, want)
				}
				return ""
			}},
	} {
		s, err := Parse("test.yaml", []byte(tc.src))
		if err != nil {
			t.Errorf("%s: Parse: %v", tc.name, err)
			continue
		}
		if !s.HasDomain("a") {
			t.Errorf("%s: no domain a", tc.name)
		}
		if tc.check != nil {
			if msg := tc.check(s); msg != "" {
				t.Errorf("%s: %s", tc.name, msg)
			}
		}
	}
	// What the reference would read differently, or silently drop, is
	// refused: a second domain in one file, a quoted "yes" for a boolean.
	for _, tc := range []struct{ name, src, want string }{
		{"a second document", "domain: a\n---\n# the second\ndomain: b\n", "test.yaml:2: more than one YAML document (---): a descriptor file holds one domain"},
		{"a quoted yes", "domain: a\ndescriptors:\n  - key: s\n    shadow_mode: 'yes'\n", `test.yaml:4: descriptors[0].shadow_mode: want true or false, not the string "yes"`},
	} {
		if _, err := Parse("test.yaml", []byte(tc.src)); err == nil || err.Error() != tc.want {
			t.Errorf("%s: Parse = %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestLoadNamesTheFilesNotRead: the reference service reads every file of
// its directory, subdirectories included, whatever their names, so a
// directory it served may hold a domain in a file Sluice does not read
// (limits.conf, a subdirectory). The set names them, for check-config and
// serve to warn: the domain would otherwise be answered OK, unknown,
// without a word. Hidden entries (a ConfigMap's ..data) are not named.
func TestLoadNamesTheFilesNotRead(t *testing.T) {
	dir := t.TempDir()
	for name, src := range map[string]string{
		"edge.yaml":       "domain: edge\n",
		"limits.conf":     "domain: conf\n",
		"sub/nested.yaml": "domain: nested\n",
		".hidden.yaml":    "domain: hidden\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Load([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "limits.conf"), filepath.Join(dir, "sub")}
	if got := s.Skipped(); fmt.Sprint(got) != fmt.Sprint(want) || !s.HasDomain("edge") {
		t.Errorf("Load(%s).Skipped() = %q, want %q", dir, got, want)
	}
	s, err = Load([]string{filepath.Join(dir, "edge.yaml")})
	if err != nil || len(s.Skipped()) != 0 {
		t.Errorf("Load(a file).Skipped() = %q, %v; want none", s.Skipped(), err)
	}
}

// TestLoadMergeDomains: with MergeDomains (the reference service's
// MERGE_DOMAIN_CONFIG), the files of one domain add their descriptors to
// it, in file order; a top-level descriptor given in two of them is an
// error naming the second, as there (it merges the top level only).
// Without it, a domain in two files is an error.
func TestLoadMergeDomains(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a.yaml", "domain: d\ndescriptors:\n  - key: k1\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: p\n    value: x*\n    rate_limit: {unit: second, requests_per_unit: 2}\n")
	b := write("b.yaml", "domain: d\ndescriptors:\n  - key: k2\n    value: v\n    descriptors:\n      - key: u\n        rate_limit: {unit: minute, requests_per_unit: 3}\n  - key: p\n    value: y*\n    rate_limit: {unit: second, requests_per_unit: 4}\n")
	o := write("other.yaml", "domain: o\n")
	if _, err := Load([]string{a, b}); err == nil || !strings.Contains(err.Error(), `domain "d" is already configured in`) {
		t.Errorf("Load of a domain in two files: %v, want refused", err)
	}
	s, err := LoadWith([]string{a, b, o}, LoadOptions{MergeDomains: true})
	if err != nil {
		t.Fatalf("LoadWith(MergeDomains): %v", err)
	}
	if s.Domains() != 2 || s.Rules() != 4 || len(s.Files()) != 3 {
		t.Errorf("merged: %d domains, %d rules, files %v; want 2, 4 and the 3 files", s.Domains(), s.Rules(), s.Files())
	}
	for _, tc := range []struct {
		entries []Entry
		want    uint32
	}{
		{[]Entry{{"k1", "any"}}, 1},
		{[]Entry{{"p", "x1"}}, 2},
		{[]Entry{{"k2", "v"}, {"u", "me"}}, 3},
		{[]Entry{{"p", "y1"}}, 4},
	} {
		var m Match
		s.Lookup("d", tc.entries, &m)
		if m.Rule == nil || m.Rule.RequestsPerUnit != tc.want {
			t.Errorf("merged Lookup(%v) = %+v, want %d per unit", tc.entries, m.Rule, tc.want)
		}
	}
	c := write("c.yaml", "domain: d\ndescriptors:\n  - key: k3\n    rate_limit: {unit: second, requests_per_unit: 5}\n  - key: k1\n    rate_limit: {unit: hour, requests_per_unit: 6}\n")
	_, err = LoadWith([]string{a, c}, LoadOptions{MergeDomains: true})
	if want := c + `:5: descriptors[1]: duplicate descriptor "k1": the same key and value twice at one level (domain "d" merged from ` + a + ")"; err == nil || err.Error() != want {
		t.Errorf("LoadWith(MergeDomains) of a descriptor in two files: %v, want %q", err, want)
	}
}

// TestParseRefusesUnitMultiplier: unit_multiplier is a field of Envoy's
// limit override only; the reference service's files have no such key
// and it refuses the file (unknown key), as Sluice does.
func TestParseRefusesUnitMultiplier(t *testing.T) {
	_, err := Parse("f.yaml", []byte("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1, unit_multiplier: 5}\n"))
	if err == nil || !strings.HasPrefix(err.Error(), "f.yaml:4: descriptors[0].rate_limit.unit_multiplier: unknown key") {
		t.Errorf("Parse(a rate_limit with unit_multiplier) = %v, want an unknown key at line 4", err)
	}
}

// TestWholeNumbersWrittenAsFloats: the reference service's YAML library
// reads a number written as a float into requests_per_unit, so its files
// may hold 100.0, 1e3, or 1e+06, which Helm writes for a million given in
// its values (it reads them as floats, and renders 1000000 as 1e+06).
// Those load here too with the same value, and so does a count of
// Sluice's keys so written; a number that is not whole (the reference
// drops its fraction: 5.5 limits at 5) is refused, naming it.
func TestWholeNumbersWrittenAsFloats(t *testing.T) {
	for _, tc := range []struct {
		text string
		want uint32
	}{{"1e+06", 1_000_000}, {"100.0", 100}, {"1.5e3", 1500}, {"5.", 5}, {".5e1", 5}, {"1_000.0", 1000}, {"0.0", 0}, {"4294967295.0", 4294967295}} {
		src := "domain: d\ndescriptors:\n  - key: k\n    algorithm: token_bucket\n    burst: " + tc.text + "\n    rate_limit: {unit: minute, requests_per_unit: " + tc.text + "}\n"
		if tc.want == 0 {
			src = strings.Replace(src, "burst: 0.0", "burst: 1e0", 1)
		}
		s, err := Parse("f.yaml", []byte(src))
		if err != nil {
			t.Errorf("requests_per_unit: %s: %v", tc.text, err)
			continue
		}
		s.Each(func(r *Rule) {
			if r.RequestsPerUnit != tc.want {
				t.Errorf("requests_per_unit: %s read as %d, want %d", tc.text, r.RequestsPerUnit, tc.want)
			}
			if b := r.Limit.Burst; tc.want > 0 && b != int64(tc.want) {
				t.Errorf("burst: %s read as %d, want %d", tc.text, b, tc.want)
			}
		})
	}
	for _, tc := range []struct{ text, want string }{
		{"5.5", "f.yaml:4: descriptors[0].rate_limit.requests_per_unit: want a whole number, not the number 5.5"},
		{"1e-3", "f.yaml:4: descriptors[0].rate_limit.requests_per_unit: want a whole number, not the number 1e-3"},
		{".inf", "f.yaml:4: descriptors[0].rate_limit.requests_per_unit: want a whole number, not the number .inf"},
		{"1e+10", "f.yaml:4: descriptors[0].rate_limit.requests_per_unit: 10000000000 is out of range (0 to 4294967295)"},
		{"1e+30", "f.yaml:4: descriptors[0].rate_limit.requests_per_unit: 1e+30 is too large (at most 9223372036854775807)"},
	} {
		src := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: " + tc.text + "}\n"
		if _, err := Parse("f.yaml", []byte(src)); err == nil || err.Error() != tc.want {
			t.Errorf("requests_per_unit: %s: %v, want %q", tc.text, err, tc.want)
		}
	}
}
