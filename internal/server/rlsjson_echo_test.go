package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/memstore"
)

// TestJSONErrorEchoBounded: POST /json's 400 quotes the proto-JSON
// decoder's error, which quotes the client's input: an unknown field
// name or a malformed value of 60 KB came back whole. The error quotes
// at most a bounded start of it (and says how long the message was), as
// /v1/check's errors do, and still says what is wrong.
func TestJSONErrorEchoBounded(t *testing.T) {
	e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{})
	long := strings.Repeat("A", 60000)
	for _, c := range []struct{ body, want string }{
		{`{"domain":"web","` + long + `":1}`, `unknown field \"AAAA`},
		{`{"domain":"web","descriptors":[{"entries":[{"key":"user","value":"v"}]}],"hitsAddend":"` + strings.Repeat("9", 60000) + `"}`, "hitsAddend"},
		{`{"domain":"web","descriptors":[{"entries":[{"key":"user","value":1` + strings.Repeat("1", 6000) + `}]}]}`, "string field value"},
	} {
		resp, err := http.Post(e.http.URL+"/json", "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || len(b) > 512 || !strings.Contains(string(b), c.want) || !strings.Contains(string(b), "bytes)") {
			t.Errorf("POST /json with %.40q…: %d, %d bytes %.200q; want 400, under 512 bytes, saying %q and the message's length", c.body, resp.StatusCode, len(b), b, c.want)
		}
	}
}
