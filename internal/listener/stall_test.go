package listener

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"
)

// flowWriter is an HTTP/2 stream's writer for the test: each Write waits
// for the client to take it (take) or for the stream to be reset
// (SetWriteDeadline in the past, as stallWriter does).
type flowWriter struct {
	http.ResponseWriter
	take  chan struct{}
	reset chan struct{}
}

func (f *flowWriter) Write(b []byte) (int, error) {
	select {
	case <-f.take:
		return len(b), nil
	case <-f.reset:
		return 0, errors.New("stream reset")
	}
}

func (f *flowWriter) SetWriteDeadline(t time.Time) error {
	if !t.IsZero() && t.Before(time.Now()) {
		close(f.reset)
	}
	return nil
}

// TestStallH2: on HTTP/2 each write must end within send_timeout — a
// stream whose client takes a write 9 s after it began is never reset,
// however many writes it takes; one that takes nothing for 10 s is reset
// then, not a moment before.
func TestStallH2(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fw := &flowWriter{ResponseWriter: httptest.NewRecorder(), take: make(chan struct{}), reset: make(chan struct{})}
		result := make(chan error, 1)
		h := stallH2(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for range 20 {
				if _, err := w.Write([]byte("x")); err != nil {
					result <- err
					return
				}
			}
			result <- http.NewResponseController(w).Flush() // through stallWriter's FlushError: not reset, nothing flushes
		}), 10*time.Second)
		r := httptest.NewRequest("GET", "/", nil)
		r.ProtoMajor = 2
		go h.ServeHTTP(fw, r)
		for range 19 { // 19 writes taken 9 s after each began: 171 s in all
			time.Sleep(9 * time.Second)
			fw.take <- struct{}{}
		}
		time.Sleep(10*time.Second - time.Nanosecond)
		synctest.Wait()
		select {
		case err := <-result:
			t.Fatalf("the handler ended (%v) before the 20th write stalled for send_timeout", err)
		default:
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		select {
		case err := <-result:
			if err == nil {
				t.Fatal("a write that stalled for send_timeout succeeded")
			}
		default:
			t.Fatal("a write stalled for send_timeout was not reset")
		}
	})
}
