package h1_test

import (
	"net"
	"net/http"
	"testing"

	"github.com/sluicehq/sluice/internal/benchutil"
	"github.com/sluicehq/sluice/internal/h1"
)

// The front's own cost per request: a forward-auth question as nginx's
// auth_request sends it, over loopback from a raw client that allocates
// nothing, to a handler that reads four headers and sets five without
// allocating (the shape of /v1/forward-auth with the decision taken
// out). allocs/op and B/op are the front's; -cpuprofile shows its CPU
// next to the kernel's.
func BenchmarkServe(b *testing.B) {
	limit, remaining, reset, policy, rl := []string{"100"}, []string{"99"}, []string{"60"}, []string{`"r";q=100;w=60`}, []string{`"r";r=99;t=60`}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Forwarded-Uri") == "" || r.Header.Get("X-Forwarded-Method") == "" ||
			r.Header.Get("X-Forwarded-Host") == "" || r.Header.Get("X-Forwarded-For") == "" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		hh := w.Header()
		hh["X-Ratelimit-Limit"], hh["X-Ratelimit-Remaining"], hh["X-Ratelimit-Reset"] = limit, remaining, reset
		hh["Ratelimit-Policy"], hh["Ratelimit"] = policy, rl
		w.WriteHeader(http.StatusOK)
	})
	for _, tc := range []struct{ name, req string }{
		{"nginx", "GET /v1/forward-auth HTTP/1.1\r\n" +
			"X-Forwarded-Method: GET\r\n" +
			"X-Forwarded-Uri: /items?page=1\r\n" +
			"X-Forwarded-Host: api.example.com\r\n" +
			"X-Forwarded-For: 198.51.100.7\r\n" +
			"Host: sluice\r\n" +
			"User-Agent: curl/8.0\r\n" +
			"Accept: */*\r\n\r\n"},
		// Lower-case names, as HTTP/2-minded clients and some proxies send.
		{"lowercase", "GET /v1/forward-auth HTTP/1.1\r\n" +
			"x-forwarded-method: GET\r\n" +
			"x-forwarded-uri: /items?page=1\r\n" +
			"x-forwarded-host: api.example.com\r\n" +
			"x-forwarded-for: 198.51.100.7\r\n" +
			"host: sluice\r\n" +
			"user-agent: curl/8.0\r\n" +
			"accept: */*\r\n\r\n"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			front := h1.New(&http.Server{Handler: h})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go front.Serve(ln)
			defer front.Close()
			req := []byte(tc.req)
			b.ReportAllocs()
			defer benchutil.ReportCPU(b)()
			benchutil.Clients(b, ln.Addr().String(), 4, func() []byte { return req }, nil)
		})
	}
}
