package rules

import (
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/sluicehq/sluice/internal/hop"
)

// Method overrides. Frameworks serve a POST that names another method in
// a header or a parameter as that method, for clients that can send only
// GET and POST (HTML forms, firewalls that pass no other): Express's
// method-override reads X-HTTP-Method-Override (and a query parameter it
// is given, such as _method); Symfony and Laravel read
// X-HTTP-Method-Override, then _method in the form body or the query;
// Google's APIs read X-HTTP-Method-Override; OData services X-HTTP-Method;
// others X-Method-Override. A rule that counted such a POST as a POST
// alone would let a client past a DELETE rule's limit go on deleting by
// POST. So a POST is matched and counted under each reading (Set.Match):
// its own method and each method such a header or the query's _method
// names, upper-cased. A form body's _method (Rails' Rack::MethodOverride
// reads only that one) is not read: the rules decide before the body is
// read, on the request's head alone.

// overrideHeaders are the method-override headers, in canonical form.
var overrideHeaders = [...]string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

// OverrideHeader reports whether the header name k is a method-override
// header, in any case or spelled with '_' as CGI-style servers read it
// (X_HTTP_Method_Override). The proxy drops such a field from a
// request's trailer: the rules read a request's head alone.
func OverrideHeader(k string) bool {
	for _, name := range overrideHeaders {
		if hop.SameName(k, name) {
			return true
		}
	}
	return false
}

// overrideParam is the query parameter that names a POST's method.
const overrideParam = "_method"

// methodsFor returns the readings of req's method (methods) when r lists
// methods or is keyed by method, else none: nothing of req is scanned for
// overrides while no rule cares (the caller matches req.Method then).
func (p *reqPath) methodsFor(r *Rule, req *http.Request) (ms []string, tooMany bool) {
	if !r.methodMinded() {
		return nil, false
	}
	return p.methods(req)
}

// methods returns the readings of req's method: req.Method, and for a
// POST each other method it names (overrideMethods), at most
// MaxKeysPerRule in all; tooMany when it names more. It scans req once,
// for the first rule that asks.
func (p *reqPath) methods(req *http.Request) (ms []string, tooMany bool) {
	if p.nm == 0 {
		p.nm = 1
		p.ms[0] = req.Method
		if strings.EqualFold(req.Method, http.MethodPost) {
			p.overrideMethods(req)
		}
	}
	return p.ms[:min(int(p.nm), MaxKeysPerRule)], int(p.nm) > MaxKeysPerRule
}

// overrideMethods adds to p.ms the methods req's method-override headers
// (in any case, or spelled with '_' as CGI-style servers read them) and
// its query's _method parameter name, each value upper-cased; a header's
// value also split at commas (Express reads the first of a value joined
// from two lines; counted under each).
func (p *reqPath) overrideMethods(req *http.Request) {
	for _, name := range overrideHeaders {
		for _, v := range req.Header[name] {
			p.addMethods(v)
		}
	}
	if p.underscored(req.Header) {
		for k, vv := range req.Header {
			if strings.IndexByte(k, '_') >= 0 && OverrideHeader(k) {
				for _, v := range vv {
					p.addMethods(v)
				}
			}
		}
	}
	if req.URL != nil {
		p.queryMethods(req.URL.RawQuery)
	}
}

// queryMethods adds the values of the query's _method parameter, under
// its own name, escaped or not, or one PHP reads as it (nameAlias:
// ".method"), each up to a '#' (where Node's parser ends the query), in
// the whole query (Go and PHP read on past a '#').
func (p *reqPath) queryMethods(raw string) {
	for raw != "" && int(p.nm) <= MaxKeysPerRule {
		var kv string
		kv, raw, _ = strings.Cut(raw, "&")
		k, v, _ := strings.Cut(kv, "=")
		if strings.ContainsAny(k, "%+") {
			if u, err := url.QueryUnescape(k); err == nil {
				k = u
			}
		}
		if k != overrideParam && !nameAlias(k, overrideParam) {
			continue
		}
		v, _, _ = strings.Cut(v, "#")
		if strings.ContainsAny(v, "%+") {
			if u, err := url.QueryUnescape(v); err == nil {
				v = u
			}
		}
		p.addMethod(v)
	}
}

// addMethods adds each comma-separated method of a header value v.
func (p *reqPath) addMethods(v string) {
	for v != "" && int(p.nm) <= MaxKeysPerRule {
		var m string
		m, v, _ = strings.Cut(v, ",")
		p.addMethod(m)
	}
}

// addMethod adds the method m names, trimmed and upper-cased, unless it
// is no method (not one token) or there already; past MaxKeysPerRule it
// counts one more and stops (methods reports tooMany).
func (p *reqPath) addMethod(m string) {
	m = strings.TrimSpace(m)
	if m == "" || !httpguts.ValidHeaderFieldName(m) {
		return
	}
	for _, x := range p.ms[:min(int(p.nm), MaxKeysPerRule)] {
		if strings.EqualFold(x, m) {
			return
		}
	}
	if int(p.nm) < MaxKeysPerRule {
		p.ms[p.nm] = strings.ToUpper(m)
	}
	p.nm++
}

// methodMinded reports whether r cares about a request's method: it
// lists methods, or is keyed by method.
func (r *Rule) methodMinded() bool {
	if len(r.Methods) > 0 {
		return true
	}
	for i := range r.Key {
		if r.Key[i].Kind == PartMethod {
			return true
		}
	}
	return false
}
