package server

import (
	"bytes"
	"encoding/json"
	"io"
	"math/big"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/rules"
)

// oracle decodes b as encoding/json would for the endpoint: one object,
// unknown fields refused, nothing after it. strictOK also requires what
// parseCheck requires beyond that: field names spelled exactly, no nulls.
//
// The body must be an object: encoding/json decodes a top-level null into
// a struct as a no-op, but a body of null asks nothing (400, "body must be
// a JSON object").
func oracle(b []byte) (req checkRequest, ok, strictOK bool) {
	req = checkRequest{Cost: 1}
	if tok, err := json.NewDecoder(bytes.NewReader(b)).Token(); err != nil || tok != json.Delim('{') {
		return req, false, false
	}
	var raw struct {
		Rule string          `json:"rule"`
		Key  string          `json:"key"`
		Cost json.RawMessage `json:"cost"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return req, false, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, false, false
	}
	req.Rule, req.Key = raw.Rule, raw.Key
	// The cost as an int64 field, but for a number spelled with a
	// fraction or an exponent, taken when it is a whole number: null
	// leaves it, a number must be whole and within int64, anything else
	// is refused.
	switch c := string(raw.Cost); {
	case c == "" || c == "null":
	case c[0] == '-' || c[0] >= '0' && c[0] <= '9':
		n, ok := wholeInt64(c)
		if !ok {
			return req, false, false
		}
		req.Cost = n
	default:
		return req, false, false
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil || !isText(b) {
		return req, true, false
	}
	// json.Unmarshal into a map keeps the last of repeated names; look at
	// every name with a decoder walk instead. A repeated name is refused.
	dec = json.NewDecoder(bytes.NewReader(b))
	dec.Token() // {
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return req, true, false
		}
		if seen[tok.(string)] {
			return req, true, false
		}
		seen[tok.(string)] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return req, true, false
		}
		if name := tok.(string); name != "rule" && name != "key" && name != "cost" || string(v) == "null" {
			return req, true, false
		}
	}
	return req, true, true
}

// wholeInt64 returns the value of the JSON number s (as encoding/json
// checked it) if it is a whole number within int64, exactly, by big.Rat
// (after bounding the exponent, which big.Rat would raise 10 to).
func wholeInt64(s string) (int64, bool) {
	mant, exp := s, 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant = s[:i]
		e, err := strconv.Atoi(s[i+1:])
		if err != nil || e > 1000 || e < -1000 {
			// Beyond ±1000 (the fuzzer's bodies hold fewer digits): zero
			// stays zero; anything else is too large, or a fraction.
			return 0, strings.Trim(mant, "-0.") == ""
		}
		exp = e
	}
	r, ok := new(big.Rat).SetString(mant + "e" + strconv.Itoa(exp))
	if !ok || !r.IsInt() || !r.Num().IsInt64() {
		return 0, false
	}
	return r.Num().Int64(), true
}

// isText reports whether the strings of b, a JSON text encoding/json
// accepts, are text: valid UTF-8, every escaped surrogate one of a pair.
func isText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	in := false
	for i := 0; i < len(b); i++ {
		switch {
		case b[i] == '"':
			in = !in
		case in && b[i] == '\\' && b[i+1] == 'u':
			r, _ := strconv.ParseUint(string(b[i+2:i+6]), 16, 32)
			switch {
			case 0xdc00 <= r && r <= 0xdfff:
				return false // a low surrogate first
			case 0xd800 <= r && r <= 0xdbff:
				if i+12 > len(b) || b[i+6] != '\\' || b[i+7] != 'u' {
					return false
				}
				r2, _ := strconv.ParseUint(string(b[i+8:i+12]), 16, 32)
				if r2 < 0xdc00 || r2 > 0xdfff {
					return false
				}
				i += 6
			}
			i += 5
		case in && b[i] == '\\':
			i++ // the escaped character, '"' included
		}
	}
	return true
}

func TestParseCheck(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want checkRequest
		ok   bool
	}{
		{`{"rule":"a","key":"k","cost":3}`, checkRequest{"a", "k", 3}, true},
		{` { "key" : "k" , "rule" : "a" } `, checkRequest{"a", "k", 1}, true},
		{`{}`, checkRequest{"", "", 1}, true},
		{`{"rule":"a","rule":"b"}`, checkRequest{}, false}, // a repeated field is refused
		{`{"key":"a","cost":1,"key":"b"}`, checkRequest{}, false},
		{`{"cost":1,"cost":2}`, checkRequest{}, false},
		{`{"cost":9223372036854775808}`, checkRequest{}, false},
		{`{"cost":-9223372036854775809}`, checkRequest{}, false},
		{`{"key":"\u00e9\ud83d\ude00\n\"\\\/"}`, checkRequest{"", "é😀\n\"\\/", 1}, true},
		// Text that is not UTF-8 is refused: encoding/json would read
		// every invalid byte and lone surrogate as U+FFFD, so that keys
		// "caf\xe9" and "caf\xe8" (Latin-1) shared one counter.
		{`{"key":"\ud800x"}`, checkRequest{}, false},
		{`{"key":"\udc00"}`, checkRequest{}, false},
		{`{"key":"\ud800\ud800"}`, checkRequest{}, false},
		{"{\"key\":\"a\xffb\"}", checkRequest{}, false},
		{"{\"key\":\"caf\xe9\"}", checkRequest{}, false},
		{"{\"key\":\"\xed\xa0\x80\"}", checkRequest{}, false}, // a surrogate in UTF-8
		{"{\"rule\":\"\xc3\"}", checkRequest{}, false},
		{"{\"k\xffey\":\"a\"}", checkRequest{}, false},
		{`{"key":"\ufffd"}`, checkRequest{"", "\ufffd", 1}, true}, // U+FFFD itself is a character
		{"{\"key\":\"\xef\xbf\xbd\"}", checkRequest{"", "\ufffd", 1}, true},
		{`{"key":"\\ud800"}`, checkRequest{"", `\ud800`, 1}, true}, // an escaped backslash, then text
		{`{"cost":-0}`, checkRequest{"", "", 0}, true},
		{`{"cost":-5}`, checkRequest{"", "", -5}, true},
		{`{"cost":01}`, checkRequest{}, false},
		// A whole number is one whatever its spelling; json.Number's text,
		// not a float64, so that no digit is lost.
		{`{"cost":1e2}`, checkRequest{"", "", 100}, true},
		{`{"cost":1E+2}`, checkRequest{"", "", 100}, true},
		{`{"cost":10.0}`, checkRequest{"", "", 10}, true},
		{`{"cost":1000e-2}`, checkRequest{"", "", 10}, true},
		{`{"cost":0.0e999999999999}`, checkRequest{"", "", 0}, true},
		{`{"cost":-0.0}`, checkRequest{"", "", 0}, true},
		{`{"cost":-2.50e1}`, checkRequest{"", "", -25}, true},
		{`{"cost":9.223372036854775807e18}`, checkRequest{"", "", 9223372036854775807}, true},
		{`{"cost":-9.223372036854775808e18}`, checkRequest{"", "", -9223372036854775808}, true},
		{`{"cost":9.223372036854775808e18}`, checkRequest{}, false},
		{`{"cost":1.5}`, checkRequest{}, false},
		{`{"cost":1e-1}`, checkRequest{}, false},
		{`{"cost":1e400}`, checkRequest{}, false},
		{`{"cost":1e-999999999999999999999}`, checkRequest{}, false},
		{`{"cost":1e99999999999999999999}`, checkRequest{}, false},
		{`{"cost":1.}`, checkRequest{}, false},
		{`{"cost":.5}`, checkRequest{}, false},
		{`{"cost":1e}`, checkRequest{}, false},
		{`{"cost":1e+}`, checkRequest{}, false},
		{`{"cost":}`, checkRequest{}, false},
		{"{\"key\":\"a\tb\"}", checkRequest{}, false}, // raw control character
		{`{"key":"a\tb"}`, checkRequest{"", "a\tb", 1}, true},
		{`{"key":"a"`, checkRequest{}, false},
		{`{"key":"a",}`, checkRequest{}, false},
		{`{"key":"a"}x`, checkRequest{}, false},
		{`"str"`, checkRequest{}, false},
		{`null`, checkRequest{}, false},
		{" null\n", checkRequest{}, false},
		{``, checkRequest{}, false},
	} {
		got := checkRequest{Cost: 1}
		err := parseCheck([]byte(tc.in), &got)
		if (err == nil) != tc.ok || tc.ok && got != tc.want {
			t.Errorf("parseCheck(%q) = %+v, %v; want %+v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
		if _, ok, strict := oracle([]byte(tc.in)); strict != tc.ok && ok == tc.ok {
			t.Errorf("oracle(%q) = ok %v strict %v: the table disagrees with encoding/json", tc.in, ok, strict)
		}
	}
}

// parseCheck accepts exactly what encoding/json accepts under the
// endpoint's stricter rules (text only, among them), with the same values.
func FuzzParseCheck(f *testing.F) {
	for _, s := range []string{
		`{"rule":"a","key":"k","cost":3}`, `{"key":"\u00e9\ud83d\ude00"}`, `{"key":"\ud800\udc00\ud800"}`, `{"rule":null}`,
		`{"Rule":"a"}`, `{"cost":9223372036854775807}`, `{"cost":-9223372036854775808}`, `{"cost":1.0}`, `[]`, ` {} `, `{"cost":1e1}`, `{"cost":-25e-1}`, `{"cost":1e400}`,
		"{\"key\":\"\xed\xa0\x80\"}", `{"key":"\/\b\f"}`, `{"k\u0065y":"x"}`, `{"cost":"1"}`, `{"key":true}`,
		"{\"key\":\"caf\xe9\"}", `{"key":"\udc00\ud800"}`, `{"key":"\\\ud83d\ude00\\"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := checkRequest{Cost: 1}
		err := parseCheck(b, &got)
		want, ok, strict := oracle(b)
		switch {
		case err == nil && !ok:
			t.Fatalf("parseCheck(%q) accepted %+v; encoding/json refuses it", b, got)
		case err == nil && !isText(b):
			t.Fatalf("parseCheck(%q) accepted %+v: its strings are not text", b, got)
		case err == nil && got != want:
			t.Fatalf("parseCheck(%q) = %+v; encoding/json gives %+v", b, got, want)
		case err != nil && strict:
			t.Fatalf("parseCheck(%q) refused it (%v); encoding/json accepts %+v", b, err, want)
		}
	})
}

func TestUnknownRuleMessage(t *testing.T) {
	var specs []rules.Spec
	for i := range 7 {
		specs = append(specs, rules.Spec{Name: "r" + strconv.Itoa(i), Rate: "1/s"})
	}
	set, err := rules.Compile("t.yaml", specs)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		set  *rules.Set
		want string
	}{
		{"x", set, `unknown rule "x"; rules are "r0", "r1", "r2", "r3", "r4", … (7 in all: GET /v1/rules)`},
		{"x", &rules.Set{}, `unknown rule "x"; no rules are configured`},
		{strings.Repeat("é", 40), set, `unknown rule "` + strings.Repeat("é", 32) + `"… (80 bytes; a rule name has at most 64); rules are`},
	} {
		if got := unknownRule(tc.name, tc.set); !strings.HasPrefix(got, tc.want) {
			t.Errorf("unknownRule(%.20q…) = %q, want it to start %q", tc.name, got, tc.want)
		}
	}
}
