package proxy

import (
	"fmt"
	"net/http"
)

// informational counts the 1xx answers (100 Continue, 103 Early Hints) an
// upstream sends before its final answer, on both paths (fast.go:
// readAnswer; reverse.go: relayWriter and forwardInfo.got1xx): each is
// relayed to the client, and net/http's Transport, which ReverseProxy has
// hand them over, reads them without a bound once someone examines them
// (its header budget starts again at each). An upstream could otherwise
// keep the request, and its client, reading 1xx heads for ever. Past
// MaxInformational answers, or past DefaultMaxResponseHeaderBytes of their
// header fields together, the request fails (502, logged as the
// upstream's failure) and what is past the bound is not relayed.
type informational struct {
	n     int
	bytes int64 // of the fields, each counted as the line "Name: value\r\n"
}

// add counts a 1xx answer with the header fields h; it returns the
// error to fail the request with when the answer is past the bound.
func (in *informational) add(h http.Header) error {
	in.n++
	if in.n > MaxInformational {
		return fmt.Errorf("proxy: upstream sent more than %d 1xx answers before its final one", MaxInformational)
	}
	for k, vv := range h {
		for _, v := range vv {
			in.bytes += int64(len(k) + len(v) + 4)
		}
	}
	if in.bytes > DefaultMaxResponseHeaderBytes {
		return fmt.Errorf("proxy: upstream's 1xx answers carry header fields over %d bytes", DefaultMaxResponseHeaderBytes)
	}
	return nil
}
