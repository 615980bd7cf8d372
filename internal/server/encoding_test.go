package server_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/metrics/metricstest"
	"github.com/sluicehq/sluice/memstore"
)

func gzipped(t *testing.T, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	z := gzip.NewWriter(&b)
	io.WriteString(z, s)
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// postEncoded POSTs body to url with Content-Encoding enc.
func postEncoded(t *testing.T, url, enc string, body []byte) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", enc)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestBodyEncodingRefused: the decision API reads bodies as they are
// sent, so a compressed one (Content-Encoding other than identity) is
// answered 415 naming its coding, with Accept-Encoding: identity (RFC
// 9110, 15.5.16), rather than 400 "bad JSON" for a body that is good JSON
// once decoded; a plain body labelled gzip is refused too (something in
// between removed the coding but left its label). Nothing is decided for
// it; identity is taken.
func TestBodyEncodingRefused(t *testing.T) {
	f := start(t, memstore.New(memstore.Options{}), "", nil)
	body := `{"rule":"api","key":"enc"}`
	for _, path := range []string{"/v1/check", "/v1/report"} {
		for _, tc := range []struct {
			enc  string
			body []byte
		}{{"gzip", gzipped(t, body)}, {"gzip", []byte(body)}, {"br", []byte(body)}, {"identity, gzip", gzipped(t, body)}} {
			resp, b := postEncoded(t, f.srv.URL+path, tc.enc, tc.body)
			if resp.StatusCode != http.StatusUnsupportedMediaType || !strings.Contains(b, `Content-Encoding \"`+tc.enc+`\"`) || resp.Header.Get("Accept-Encoding") != "identity" {
				t.Errorf("POST %s with Content-Encoding %q: %d %q (Accept-Encoding %q), want 415 naming it, with Accept-Encoding identity", path, tc.enc, resp.StatusCode, b, resp.Header.Get("Accept-Encoding"))
			}
		}
	}
	if got := metricstest.Gather(t, f.reg)[`sluice_decisions_total{result="allowed",rule="api"}`]; got != 0 {
		t.Errorf("after encoded bodies only: %v decisions allowed, want 0", got)
	}
	if resp, b := postEncoded(t, f.srv.URL+"/v1/check", "identity", []byte(body)); resp.StatusCode != 200 || !strings.Contains(b, `"remaining":2`) {
		t.Errorf("POST /v1/check with Content-Encoding identity: %d %q, want 200 with the first request's remaining 2", resp.StatusCode, b)
	}
}

// TestJSONEncodingRefused: POST /json, the Envoy service's HTTP form,
// refuses a compressed body as /v1/check does, counting nothing.
func TestJSONEncodingRefused(t *testing.T) {
	e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{})
	body := `{"domain":"web","descriptors":[{"entries":[{"key":"user","value":"enc"}]}]}`
	resp, b := postEncoded(t, e.http.URL+"/json", "gzip", gzipped(t, body))
	if resp.StatusCode != http.StatusUnsupportedMediaType || !strings.Contains(b, `Content-Encoding \"gzip\"`) || resp.Header.Get("Accept-Encoding") != "identity" {
		t.Errorf("POST /json gzipped: %d %q (Accept-Encoding %q), want 415 naming gzip, with Accept-Encoding identity", resp.StatusCode, b, resp.Header.Get("Accept-Encoding"))
	}
	if got := envoyHits(t, e); got != 0 {
		t.Errorf("after a gzipped /json: %v hits counted, want 0", got)
	}
	if resp, b := postEncoded(t, e.http.URL+"/json", "identity", []byte(body)); resp.StatusCode != 200 {
		t.Errorf("POST /json with Content-Encoding identity: %d %q, want 200", resp.StatusCode, b)
	}
}
