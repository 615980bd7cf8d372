package daemon

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// family is one metric family as GET /metrics shows it in the text
// exposition format: its # HELP and # TYPE lines and its samples.
type family struct {
	help, typ string
	samples   []sample
}

// sample is one sample line: the name (a histogram's carries _bucket,
// _sum or _count), its labels and its value.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// scrape GETs url (a daemon's /metrics) and parses the text exposition
// format, failing the test on a line it cannot read.
func scrape(t *testing.T, url string, header ...string) map[string]*family {
	t.Helper()
	r := get(t, url, header...)
	if r.status != http.StatusOK {
		t.Fatalf("GET %s: %d %q", url, r.status, r.body)
	}
	return parseExposition(t, strings.NewReader(r.body))
}

func parseExposition(t *testing.T, rd io.Reader) map[string]*family {
	t.Helper()
	fams := map[string]*family{}
	fam := func(name string) *family {
		if f := fams[name]; f != nil {
			return f
		}
		f := &family{}
		fams[name] = f
		return f
	}
	sc := bufio.NewScanner(rd)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			continue
		case strings.HasPrefix(line, "# HELP "):
			name, help, _ := strings.Cut(line[len("# HELP "):], " ")
			fam(name).help = help
			continue
		case strings.HasPrefix(line, "# TYPE "):
			name, typ, _ := strings.Cut(line[len("# TYPE "):], " ")
			fam(name).typ = typ
			continue
		case strings.HasPrefix(line, "#"):
			continue
		}
		s, ok := parseSample(line)
		if !ok {
			t.Fatalf("exposition: cannot read the line %q", line)
		}
		base := s.name
		if _, known := fams[base]; !known {
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(base, suf); ok && fams[b] != nil {
					base = b
				}
			}
		}
		f := fam(base)
		f.samples = append(f.samples, s)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("exposition: %v", err)
	}
	return fams
}

// parseSample reads `name{l="v",…} value`, label values escaped as the
// format says (\\, \", \n).
func parseSample(line string) (sample, bool) {
	s := sample{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return s, false
	}
	s.name = line[:i]
	rest := line[i:]
	if rest[0] == '{' {
		rest = rest[1:]
		for {
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.Index(rest, `="`)
			if eq <= 0 {
				return s, false
			}
			name := rest[:eq]
			rest = rest[eq+2:]
			var v strings.Builder
			closed := false
			for j := 0; j < len(rest); j++ {
				c := rest[j]
				if c == '\\' && j+1 < len(rest) {
					j++
					switch rest[j] {
					case 'n':
						v.WriteByte('\n')
					default:
						v.WriteByte(rest[j])
					}
					continue
				}
				if c == '"' {
					rest, closed = rest[j+1:], true
					break
				}
				v.WriteByte(c)
			}
			if !closed {
				return s, false
			}
			s.labels[name] = v.String()
			rest = strings.TrimPrefix(rest, ",")
		}
	}
	fields := strings.Fields(rest)
	if len(fields) < 1 {
		return s, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, false
	}
	s.value = v
	return s, true
}

// series counts the samples of all families: the series a scrape stores.
func series(fams map[string]*family) int {
	n := 0
	for _, f := range fams {
		n += len(f.samples)
	}
	return n
}

// value returns the sum of the samples named name whose labels include
// labels (name=value pairs).
func (f *family) value(name string, labels ...string) float64 {
	var sum float64
	for _, s := range f.samples {
		if s.name != name {
			continue
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			if s.labels[labels[i]] != labels[i+1] {
				match = false
			}
		}
		if match {
			sum += s.value
		}
	}
	return sum
}
