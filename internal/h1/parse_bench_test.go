package h1

import "testing"

// BenchmarkParse is the front's parse of a forward-auth question as nginx
// sends it (examples/gateways/nginx), into a connection's reused request:
// no system calls, so steadier than the benchmarks over loopback.
func BenchmarkParse(b *testing.B) {
	head := []byte("GET /v1/forward-auth HTTP/1.1\r\n" +
		"X-Forwarded-Method: GET\r\n" +
		"X-Forwarded-Uri: /items?page=1\r\n" +
		"X-Forwarded-Host: api.example.com\r\n" +
		"X-Forwarded-For: 198.51.100.7\r\n" +
		"Host: sluice\r\n" +
		"User-Agent: curl/8.0\r\n" +
		"Accept: */*\r\n\r\n")
	var rq request
	b.ReportAllocs()
	for b.Loop() {
		p, ok := parse(head, &rq, 0)
		if !ok || len(p.header) != 6 {
			b.Fatalf("parse: ok %v, %d headers", ok, len(p.header))
		}
		rq.release(p.lines)
	}
}
