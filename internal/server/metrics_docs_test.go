package server_test

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/doctest"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
)

// scraped is one metric family of a /metrics answer.
type scraped struct {
	help, typ string
	labels    map[string]map[string]bool // label name → values seen
}

// scrapeMetrics GETs url (a /metrics) and reads the text exposition: each
// family's HELP, TYPE and the labels of its series (a histogram's le
// left out).
func scrapeMetrics(t *testing.T, url string) map[string]*scraped {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	reLabel := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
	out := map[string]*scraped{}
	family := func(name string) *scraped {
		if out[name] == nil {
			out[name] = &scraped{labels: map[string]map[string]bool{}}
		}
		return out[name]
	}
	var cur string // the family of the samples that follow (its TYPE line)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "# HELP "):
			name, help, _ := strings.Cut(line[len("# HELP "):], " ")
			family(name).help = help
		case strings.HasPrefix(line, "# TYPE "):
			name, typ, _ := strings.Cut(line[len("# TYPE "):], " ")
			family(name).typ = typ
			cur = name
		case line == "" || strings.HasPrefix(line, "#"):
		default:
			if cur == "" || !strings.HasPrefix(line, cur) {
				t.Fatalf("sample %q outside its family (last TYPE: %q)", line, cur)
			}
			_, labels, _ := strings.Cut(line, "{")
			labels, _, _ = strings.Cut(labels, "}")
			for _, m := range reLabel.FindAllStringSubmatch(labels, -1) {
				if m[1] == "le" && out[cur].typ == "histogram" {
					continue
				}
				if out[cur].labels[m[1]] == nil {
					out[cur].labels[m[1]] = map[string]bool{}
				}
				out[cur].labels[m[1]][m[2]] = true
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// documented is one row of a metrics table of the docs.
type documented struct {
	page   string
	labels map[string][]string // label name → the values the row lists (nil: none listed)
	hist   bool                // the meaning starts "histogram:"
}

// metricTables reads the metrics tables of the docs: docs/http.md's
// ("| `name` | `label` = `v1`, `v2`, `label2` | meaning |") and
// docs/envoy.md's ("| `name{label,label2}` | meaning |").
func metricTables(t *testing.T) map[string]documented {
	t.Helper()
	reRow := regexp.MustCompile("^\\| `(sluice_[a-z0-9_]+)(?:\\{([a-z_,]+)\\})?` \\|(.*)\\|$")
	out := map[string]documented{}
	for _, page := range []string{"docs/http.md", "docs/envoy.md"} {
		b, err := os.ReadFile(filepath.Join(doctest.Root(), page))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			m := reRow.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			d := documented{page: page, labels: map[string][]string{}}
			cells := strings.Split(m[3], " | ")
			meaning := cells[len(cells)-1]
			if m[2] != "" {
				for _, l := range strings.Split(m[2], ",") {
					d.labels[l] = nil
				}
			} else if len(cells) == 2 {
				// `a`, `b` = `v1`, `v2`: names, the last with its values.
				names, values, _ := strings.Cut(cells[0], "=")
				var last string
				for i, s := range strings.Split(names, "`") {
					if i%2 == 1 {
						d.labels[s], last = nil, s
					}
				}
				for i, s := range strings.Split(values, "`") {
					if i%2 == 1 {
						d.labels[last] = append(d.labels[last], s)
					}
				}
			}
			d.hist = strings.HasPrefix(strings.TrimSpace(meaning), "histogram:")
			out[m[1]] = d
		}
	}
	if len(out) < 20 {
		t.Fatalf("found %d rows in the metrics tables of docs/http.md and docs/envoy.md; the search is broken", len(out))
	}
	return out
}

// TestMetricsScrapeMatchesDocs scrapes GET /metrics over a real listener,
// as Prometheus does, from a registry holding every family that
// internal/metrics makes (a rule's counters, the Envoy service's, the
// three listeners'), and holds it to the metrics tables of docs/http.md
// and docs/envoy.md (TestDocMetricNames in internal/doctest checks only
// that the names appear somewhere): each family scraped is a row, with a
// HELP text; its labels are the row's, and the values a row lists for a
// label are those the series carry; a row says "histogram:" exactly for a
// histogram, and a counter's name, only, ends in _total. Each row is
// scraped too, but those the daemon registers itself (its stores' and
// listeners' func metrics), named below.
func TestMetricsScrapeMatchesDocs(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	m.Rule("r")
	for _, l := range []string{"api", "proxy", "grpc"} {
		m.Listener(l)
	}
	m.Envoy().Descriptor("web", "user", false)
	e, err := engine.New(engine.Options{Store: memstore.New(memstore.Options{}), Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	h, err := server.New(server.Options{Engine: func() *engine.Engine { return e }, Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	got := scrapeMetrics(t, srv.URL+"/metrics")
	docs := metricTables(t)
	for name, f := range got {
		d, ok := docs[name]
		if !ok {
			t.Errorf("%s is served on /metrics but is no row of the metrics tables (docs/http.md, docs/envoy.md)", name)
			continue
		}
		if f.help == "" {
			t.Errorf("%s: no HELP text", name)
		}
		var gotNames, docNames []string
		for l := range f.labels {
			gotNames = append(gotNames, l)
		}
		for l := range d.labels {
			docNames = append(docNames, l)
		}
		slices.Sort(gotNames)
		slices.Sort(docNames)
		if !slices.Equal(gotNames, docNames) {
			t.Errorf("%s: labels %v on /metrics, %v in %s", name, gotNames, docNames, d.page)
		}
		for l, values := range d.labels {
			if values == nil {
				continue
			}
			var seen []string
			for v := range f.labels[l] {
				seen = append(seen, v)
			}
			slices.Sort(seen)
			slices.Sort(values)
			if !slices.Equal(seen, values) {
				t.Errorf("%s: label %s has the values %v on /metrics, %v in %s", name, l, seen, values, d.page)
			}
		}
		if (f.typ == "histogram") != d.hist {
			t.Errorf("%s: TYPE %s, but %s says histogram: %v", name, f.typ, d.page, d.hist)
		}
		if (f.typ == "counter") != strings.HasSuffix(name, "_total") {
			t.Errorf("%s: TYPE %s: a counter's name, and only a counter's, ends in _total", name, f.typ)
		}
	}
	// Registered by the daemon (Metrics.GaugeFunc, CounterFunc) for the
	// store or listener it runs; not made by internal/metrics.
	daemons := []string{"sluice_overlimit_cache_hits_total", "sluice_overlimit_cache_keys", "sluice_store_local",
		"sluice_store_local_decisions_total", "sluice_store_local_switches_total", "sluice_store_local_keys",
		"sluice_store_local_refunds_dropped_total", "sluice_memstore_keys", "sluice_memstore_evictions_total",
		"sluice_redis_version_ok"}
	for name, d := range docs {
		if got[name] == nil && !slices.Contains(daemons, name) {
			t.Errorf("%s is a row of %s but is not served on /metrics", name, d.page)
		}
	}
}
