package httplimit_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sluicehq/sluice/httplimit"
)

// rawH2C is a cleartext HTTP/2 server written frame by frame, to answer
// as net/http's server never does: answer(n, fr, id) handles the n-th
// request stream (1, 2, …) of any connection, and closes the connection
// if it returns true. It returns the address and the count of request
// streams seen.
func rawH2C(t *testing.T, answer func(n int64, fr *http2.Framer, id uint32) (hangUp bool)) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	streams := new(atomic.Int64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			go func() {
				defer c.Close()
				preface := make([]byte, len(http2.ClientPreface))
				if _, err := io.ReadFull(c, preface); err != nil || string(preface) != http2.ClientPreface {
					return
				}
				fr := http2.NewFramer(c, c)
				fr.WriteSettings()
				for {
					f, err := fr.ReadFrame()
					if err != nil {
						return
					}
					switch f := f.(type) {
					case *http2.SettingsFrame:
						if !f.IsAck() {
							fr.WriteSettingsAck()
						}
					case *http2.HeadersFrame:
						if answer(streams.Add(1), fr, f.StreamID) {
							return
						}
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String() + "/", streams
}

func writeStatus(fr *http2.Framer, id uint32, status string) {
	var hb bytes.Buffer
	hpack.NewEncoder(&hb).WriteField(hpack.HeaderField{Name: ":status", Value: status})
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
}

func h2cTransport() *http.Transport {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return tr
}

// HTTP/2 refusals that are not answers: a stream refused (REFUSED_STREAM)
// or left out of a GOAWAY was not processed, and net/http's Transport
// sends it again itself; a GOAWAY that covers the stream, then the
// connection closed, may have come after the request was processed, and
// is an error for the caller. The RetryTransport adds no retry to either
// and takes nothing from its budget: they are not 429s or 503s.
func TestRetryTransportHTTP2Refusals(t *testing.T) {
	tests := []struct {
		name    string
		first   func(fr *http2.Framer, id uint32) (hangUp bool)
		streams int64
		ok      bool
	}{
		{"REFUSED_STREAM", func(fr *http2.Framer, id uint32) bool {
			return fr.WriteRSTStream(id, http2.ErrCodeRefusedStream) != nil
		}, 2, true},
		{"GOAWAY before the stream", func(fr *http2.Framer, id uint32) bool {
			fr.WriteGoAway(0, http2.ErrCodeNo, nil)
			return true
		}, 2, true},
		{"GOAWAY after the stream", func(fr *http2.Framer, id uint32) bool {
			fr.WriteGoAway(id, http2.ErrCodeNo, nil)
			return true
		}, 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			url, streams := rawH2C(t, func(n int64, fr *http2.Framer, id uint32) bool {
				if n == 1 {
					return tc.first(fr, id)
				}
				writeStatus(fr, id, "200")
				return false
			})
			budget, _ := httplimit.NewRetryBudget(0.1, 10)
			tr := h2cTransport()
			defer tr.CloseIdleConnections()
			// The timeout only turns a hang into a failure.
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
			resp, err := (&httplimit.RetryTransport{Base: tr, Budget: budget}).RoundTrip(req)
			if tc.ok {
				if err != nil {
					t.Fatalf("got %v, want net/http's own retry's 200", err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
					t.Errorf("got %d over %s, want 200 over HTTP/2", resp.StatusCode, resp.Proto)
				}
			} else if err == nil || !strings.Contains(err.Error(), "GOAWAY") {
				if err == nil {
					resp.Body.Close()
				}
				t.Fatalf("got %v, want the GOAWAY's error", err)
			}
			if got := streams.Load(); got != tc.streams {
				t.Errorf("server saw %d request streams, want %d", got, tc.streams)
			}
			if got := budget.Tokens(); got != 10 {
				t.Errorf("tokens: %v, want 10 (none taken)", got)
			}
		})
	}
}
