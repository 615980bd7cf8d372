package server_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/logtest"
	"github.com/sluicehq/sluice/internal/metrics/metricstest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// Envoy passes a header's bytes on as they are: HTTP allows the bytes
// 0x80–0xff in a header value (Latin-1 "caf\xe9"), and Envoy's protobuf
// sends such a string, which is not UTF-8, as it is. A call refused for
// it (the reference service's answer) is let through by Envoy's default
// failure_mode_deny: false, so a client could put one such byte in the
// header a descriptor reads and never be limited. Sluice decides the call
// on the bytes. These tests send what Envoy sends, over a real listener:
// Go's protobuf refuses to write such a string, so the request is written
// with protowire and sent as it is (rawCodec).

// rawRequest writes a RateLimitRequest as protobuf lays it out, its
// strings as they are, whatever their bytes.
func rawRequest(domain string, hits uint32, ds ...*descriptorPB) []byte {
	msg := func(b []byte, num protowire.Number, inner []byte) []byte {
		b = protowire.AppendTag(b, num, protowire.BytesType)
		return protowire.AppendBytes(b, inner)
	}
	varint := func(b []byte, num protowire.Number, v uint64) []byte {
		b = protowire.AppendTag(b, num, protowire.VarintType)
		return protowire.AppendVarint(b, v)
	}
	b := msg(nil, 1, []byte(domain))
	for _, d := range ds {
		var db []byte
		for _, e := range d.Entries {
			db = msg(db, 1, msg(msg(nil, 1, []byte(e.Key)), 2, []byte(e.Value)))
		}
		if l := d.Limit; l != nil {
			var lb []byte
			lb = varint(lb, 1, uint64(l.RequestsPerUnit))
			lb = varint(lb, 2, uint64(l.Unit))
			if m := l.UnitMultiplier; m != nil {
				lb = msg(lb, 3, varint(nil, 1, uint64(m.Value)))
			}
			db = msg(db, 2, lb)
		}
		if h := d.HitsAddend; h != nil {
			db = msg(db, 3, varint(nil, 1, h.Value))
		}
		if d.IsNegativeHits {
			db = varint(db, 4, 1)
		}
		b = msg(b, 2, db)
	}
	if hits != 0 {
		b = varint(b, 3, uint64(hits))
	}
	return b
}

// callRaw sends the request as rawRequest writes it and reads the answer
// with protobuf, which refuses a string that is not UTF-8: the answer
// echoes none of the request's.
func (e *rlsEnv) callRaw(t *testing.T, domain string, hits uint32, ds ...*descriptorPB) *rlsv3.RateLimitResponse {
	t.Helper()
	req := rawRequest(domain, hits, ds...)
	var out []byte
	if err := e.conn.Invoke(context.Background(), "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", &req, &out, grpc.ForceCodec(rawCodec{})); err != nil {
		t.Fatalf("ShouldRateLimit(%q, %v): %v", domain, ds, err)
	}
	var resp rlsv3.RateLimitResponse
	if err := proto.Unmarshal(out, &resp); err != nil {
		t.Fatalf("ShouldRateLimit(%q, %v): the answer is no RateLimitResponse: %v", domain, ds, err)
	}
	return &resp
}

// expectRaw is expect with callRaw.
func (e *rlsEnv) expectRaw(t *testing.T, what string, want []string, domain string, ds ...func() *descriptorPB) {
	t.Helper()
	for i, w := range want {
		var built []*descriptorPB
		for _, d := range ds {
			built = append(built, d())
		}
		if got := codesOf(e.callRaw(t, domain, 0, built...)); got != w {
			t.Fatalf("%s: call %d answered %s, want %s", what, i+1, got, w)
		}
	}
}

func one(kv ...string) func() *descriptorPB { return func() *descriptorPB { return desc(kv...) } }

// TestValueNotUTF8Limited: a value that is not UTF-8 is limited as any
// other (the limit admitted, then OVER_LIMIT), on its own counter: two
// values a byte apart ("caf\xe9", "caf\xe8", neither UTF-8) count apart,
// and apart from "café" in UTF-8; a descriptor beside it is decided too.
// On memory, Redis and a Redis Cluster.
func TestValueNotUTF8Limited(t *testing.T) {
	t.Parallel() // a store (a Cluster's start, for the cluster kind) and a service of its own
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			e := startRLS(t, newStore(t, kind), writeConf(t, plainConf), envOpts{})
			e.expectRaw(t, "user=caf\\xe9 with global=g", []string{"O:OO", "O:OO", "X:XO"}, "web", one("user", "caf\xe9"), one("global", "g"))
			e.expectRaw(t, "user=caf\\xe8, a byte apart", []string{"O:O", "O:O", "X:X"}, "web", one("user", "caf\xe8"))
			e.expectRaw(t, "user=café in UTF-8", []string{"O:O"}, "web", one("user", "café"))
			e.expectRaw(t, "user=\\xff\\xfe", []string{"O:O", "O:O", "X:X"}, "web", one("user", "\xff\xfe"))
			// The limit override counts on the bytes too.
			over := func(v string) func() *descriptorPB {
				return func() *descriptorPB { return withLimit(desc("plan", v), 1, typev3.RateLimitUnit_MINUTE) }
			}
			e.expectRaw(t, "plan=\\xe9 with a 1/minute override", []string{"O:O", "X:X"}, "web", over("\xe9"))
			e.expectRaw(t, "plan=\\xe8 with a 1/minute override", []string{"O:O", "X:X"}, "web", over("\xe8"))
			if got := e.callRaw(t, "web", 0, withHits(desc("user", "caf\xe9"), 0)).Statuses[0]; got.LimitRemaining != 0 || got.CurrentLimit.GetRequestsPerUnit() != 2 {
				t.Errorf("user=caf\\xe9 asked with hits_addend 0: %v, want 0 of 2 left", got)
			}
			// A key that is not UTF-8 counts as the text it is not: the
			// counter of user=ok is its own.
			if got := e.remaining(t, "web", "user", "ok"); got != 2 {
				t.Errorf("user=ok: %d of 2 left, want 2", got)
			}
		})
	}
}

// TestDomainNotUTF8: a domain that is not UTF-8 is no configured domain
// (their names come from UTF-8 files) and is answered as an unknown
// domain: OK, no limit, counted in sluice_envoy_unknown_domain_total, a
// limit override ignored with the domain.
func TestDomainNotUTF8(t *testing.T) {
	e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{})
	for range 3 {
		r := e.callRaw(t, "web\xff", 0, desc("user", "x"), withLimit(desc("user", "caf\xe9"), 1, typev3.RateLimitUnit_MINUTE))
		if codesOf(r) != "O:OO" || r.Statuses[0].CurrentLimit != nil || r.Statuses[1].CurrentLimit != nil {
			t.Fatalf("domain web\\xff: %s %v, want O:OO with no limit", codesOf(r), r.Statuses)
		}
	}
	if got := counterValue(t, e, "sluice_envoy_unknown_domain_total"); got != 3 {
		t.Errorf("sluice_envoy_unknown_domain_total = %v, want 3", got)
	}
	if got := e.remaining(t, "web", "user", "x"); got != 2 {
		t.Errorf("user=x in domain web: %d of 2 left, want 2 (web\\xff is another domain)", got)
	}
}

// counterValue sums the series of a counter.
func counterValue(t *testing.T, e *rlsEnv, name string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// TestJSONNotUTF8: POST /json is JSON text, which cannot carry a byte
// that is not UTF-8 (RFC 8259): such a body is refused, 400, with a JSON
// error naming the problem, and counts nothing. (A JSON client sends
// "caf\u00e9", which is é in UTF-8, another key than Envoy's bytes.)
func TestJSONNotUTF8(t *testing.T) {
	e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{})
	resp, err := http.Post(e.http.URL+"/json", "application/json", strings.NewReader("{\"domain\":\"web\",\"descriptors\":[{\"entries\":[{\"key\":\"user\",\"value\":\"caf\xe9\"}]}]}"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var m map[string]string
	if resp.StatusCode != http.StatusBadRequest || !utf8.Valid(b) || json.Unmarshal(b, &m) != nil || !strings.Contains(m["error"], "UTF-8") {
		t.Errorf("POST /json with a value not UTF-8: %d %q, want 400 with a JSON error naming UTF-8", resp.StatusCode, b)
	}
	if got := envoyHits(t, e); got != 0 {
		t.Errorf("%v hits counted, want 0", got)
	}
}

// TestNotUTF8Descriptors: the descriptor kinds beside the plain one
// decide values that are not UTF-8 on their bytes too: a refund
// (is_negative_hits) gives back to its own counter, a report charges past
// the limit, shadow mode counts without denying.
func TestNotUTF8Descriptors(t *testing.T) {
	t.Run("negative", func(t *testing.T) {
		e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{})
		e.expectRaw(t, "user=\\xe9 to its limit", []string{"O:O", "O:O"}, "web", one("user", "\xe9"))
		e.expectRaw(t, "user=\\xe8 to its limit", []string{"O:O", "O:O"}, "web", one("user", "\xe8"))
		if r := e.callRaw(t, "web", 0, withNegative(withHits(desc("user", "\xe9"), 1))); codesOf(r) != "O:O" || r.Statuses[0].LimitRemaining != 1 {
			t.Fatalf("refund of user=\\xe9: %s %v, want O:O with 1 left", codesOf(r), r.Statuses[0])
		}
		e.expectRaw(t, "user=\\xe9 after its refund", []string{"O:O", "X:X"}, "web", one("user", "\xe9"))
		e.expectRaw(t, "user=\\xe8, not refunded", []string{"X:X"}, "web", one("user", "\xe8"))
	})
	t.Run("report", func(t *testing.T) {
		e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, "domain: llm\ndescriptors:\n  - key: tokens\n    report: true\n    rate_limit: {unit: minute, requests_per_unit: 10}\n"), envOpts{})
		if r := e.callRaw(t, "llm", 0, withHits(desc("tokens", "t\xe9"), 25)); codesOf(r) != "X:X" {
			t.Fatalf("report of 25 against 10 for tokens=t\\xe9: %s, want X:X (charged, and over)", codesOf(r))
		}
		if r := e.callRaw(t, "llm", 0, withHits(desc("tokens", "t\xe9"), 0)); codesOf(r) != "X:X" {
			t.Errorf("a check of tokens=t\\xe9 after the report: %s, want X:X (in debt)", codesOf(r))
		}
		if r := e.callRaw(t, "llm", 0, withHits(desc("tokens", "t\xe8"), 0)); codesOf(r) != "O:O" || r.Statuses[0].LimitRemaining != 10 {
			t.Errorf("a check of tokens=t\\xe8: %s %v, want O:O with 10 left (its own counter)", codesOf(r), r.Statuses[0])
		}
	})
	t.Run("shadow", func(t *testing.T) {
		e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{shadow: true})
		for i := range 3 {
			if r := e.callRaw(t, "web", 0, desc("user", "caf\xe9")); r.OverallCode != rlsv3.RateLimitResponse_OK {
				t.Fatalf("shadow mode, call %d: %s, want OK", i+1, codesOf(r))
			}
		}
		if got := counterValue(t, e, "sluice_envoy_shadow_mode_total"); got != 1 {
			t.Errorf("sluice_envoy_shadow_mode_total = %v, want 1 (the third call, over the limit of 2)", got)
		}
	})
}

// TestNotUTF8DetailedLabels: a descriptor label made of request values
// (detailed_metric, a limit override) must be UTF-8, as every Prometheus
// label value (client_golang panics on another, ending the process); one
// made of a value that is not UTF-8 is shown as hot keys are, U+FFFD for
// each such byte then "…" and a digest of the bytes, so that two values a
// byte apart stay two series; /metrics answers.
func TestNotUTF8DetailedLabels(t *testing.T) {
	e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, `domain: d
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
`), envOpts{})
	for _, v := range []string{"caf\xe9", "caf\xe8", "café"} {
		e.callRaw(t, "d", 0, desc("user", v))
		e.callRaw(t, "d", 0, withLimit(desc("plan", v), 5, typev3.RateLimitUnit_MINUTE))
	}
	labels := metricstest.LabelValues(t, e.reg, "sluice_envoy_hits_total", "descriptor")
	for l, n := range labels {
		if !utf8.ValidString(l) {
			t.Errorf("descriptor label %q is not UTF-8", l)
		}
		if n != 1 {
			t.Errorf("descriptor label %q counted %v hits, want 1 (each value its own)", l, n)
		}
	}
	if len(labels) != 6 || labels["user_café"] != 1 || labels["plan_café"] != 1 {
		t.Errorf("descriptor labels %v; want 6, user_café and plan_café among them", labels)
	}
	for l := range labels {
		if strings.HasPrefix(l, "user_caf\ufffd…") || strings.HasPrefix(l, "plan_caf\ufffd…") {
			continue
		}
		if l != "user_café" && l != "plan_café" {
			t.Errorf("descriptor label %q; want user_caf\ufffd… and a digest for a value not UTF-8", l)
		}
	}
	resp, err := http.Get(e.http.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !utf8.Valid(b) || !strings.Contains(string(b), `descriptor="user_caf`+"\ufffd…") {
		t.Errorf("GET /metrics: %d, want 200 with the labels in UTF-8; body %.300q", resp.StatusCode, b)
	}
}

// TestNotUTF8KeyLogged: the line logged for a refund the store could not
// make names its key, which holds the request's bytes. In the text log
// (sluice serve's) the key is quoted, each byte that is not UTF-8 written
// \xNN, so that two keys a byte apart read apart; a JSON handler writes
// such a byte as U+FFFD, and its line stays valid JSON.
func TestNotUTF8KeyLogged(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			srv := redistest.StartServer(t)
			rs, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr}, Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(rs.Close)
			logs := new(redistest.SyncBuffer)
			h := slog.Handler(slog.NewTextHandler(logs, nil))
			if format == "json" {
				h = slog.NewJSONHandler(logs, nil)
			}
			e := startRLS(t, rs, writeConf(t, plainConf), envOpts{log: slog.New(h)})
			e.expectRaw(t, "user=caf\\xe9", []string{"O:O"}, "web", one("user", "caf\xe9"))
			srv.Stop()
			if r := e.callRaw(t, "web", 0, withNegative(withHits(desc("user", "caf\xe9"), 1))); codesOf(r) != "O:O" {
				t.Fatalf("a refund with Redis down: %s, want O:O", codesOf(r))
			}
			lines := logtest.Matching(logs.Lines(), "store could not give back negative hits")
			if len(lines) != 1 {
				t.Fatalf("%d lines for the failed refund, want 1: %q", len(lines), logs.Lines())
			}
			line := lines[0]
			if !utf8.ValidString(line) {
				t.Errorf("log line %q is not UTF-8", line)
			}
			if format == "text" {
				if !strings.Contains(line, `key="`) || !strings.Contains(line, `4:user4:caf\xe9"`) {
					t.Errorf("log line %s; want the key quoted, ending 4:user4:caf\\xe9", line)
				}
				return
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("log line %q is not JSON: %v", line, err)
			}
			if k, _ := m["key"].(string); !strings.HasSuffix(k, "4:user4:caf\ufffd") {
				t.Errorf("key %q in the JSON line; want it ending 4:user4:caf\ufffd", k)
			}
		})
	}
}
