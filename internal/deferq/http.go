package deferq

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
)

// StatusPath is where GET /v1/deferred/ID is served, on the decision API
// (listen).
const StatusPath = "/v1/deferred/"

// WriteAccepted answers a deferred request: 202 Accepted,
// {"deferred_id": ID}. No Location: the answer goes out on proxy.listen,
// where a path is the upstream's, and a client resolves a relative
// Location against that address; the status is served on the decision
// API, whose address the proxy does not know as its clients reach it.
func WriteAccepted(w http.ResponseWriter, id string) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	w.Write([]byte(`{"deferred_id":"` + id + `"}` + "\n"))
}

// WriteOutcomeUnknown answers a request whose enqueue has an unknown
// outcome (an *OutcomeUnknownError): 503,
// {"error":"defer_outcome_unknown","rule":R,"deferred_id":ID,"message":…},
// no Location (as WriteAccepted).
// The request may be queued under ID: the client should look there (404
// once Redis answers: it was not queued, and never will be, send it again)
// rather than send it again at once, which may have it done twice.
func WriteOutcomeUnknown(w http.ResponseWriter, rule, id string) {
	b, _ := json.Marshal(map[string]string{"error": "defer_outcome_unknown", "rule": rule, "deferred_id": id,
		"message": "over the rate limit; the request may or may not have been queued for later (Redis did not confirm): " +
			"GET " + StatusPath + id + " on the decision API tells (404: it was not)"})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusServiceUnavailable)
	w.Write(append(b, '\n'))
}

// ServeHTTP serves GET /v1/deferred/ID: 200 with the Status, 404 for an
// unknown id, 400 for a malformed one, 503 when Redis cannot answer within
// EnqueueTimeout (the client library retries a read while Redis is gone,
// for as long as the context lasts), with
// {"error":"store_unavailable","message":…} and Redis's error logged, not
// shown.
func (q *Queue) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "method not allowed (want GET, HEAD)")
		return
	}
	id := strings.TrimPrefix(r.URL.Path, StatusPath)
	ctx, cancel := context.WithTimeout(r.Context(), q.o.EnqueueTimeout)
	defer cancel()
	st, err := q.Status(ctx, id)
	switch {
	case errors.Is(err, ErrBadID):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, ErrUnknownID):
		writeError(w, http.StatusNotFound, err.Error())
	case err != nil:
		// Redis's error names keys, addresses and the server's state: it
		// is for the operator's log, and the client gets a stable answer.
		if r.Context().Err() == nil {
			if dropped, ok := q.statusLog.ok(q.o.Now().Unix(), err.Error()); ok {
				q.o.Logger.Error("defer: status not read", "id", id, "err", err, "suppressed", dropped)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"error":"store_unavailable","message":"Redis could not be read; try again later"}` + "\n"))
	default:
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(st)
	}
}

func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]string{"error": msg})
	w.Write(append(b, '\n'))
}

// logThrottle lets through one log line per second per distinct error:
// while Redis cannot answer, every client polling its deferred request's
// status gets the same error, and the log must not get one line per poll.
type logThrottle struct {
	mu      sync.Mutex
	sec     int64
	msg     string
	dropped int
}

// ok reports whether an error with message msg at second sec is logged,
// and how many were not since the last one that was.
func (t *logThrottle) ok(sec int64, msg string) (dropped int, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if sec == t.sec && msg == t.msg {
		t.dropped++
		return 0, false
	}
	dropped, t.sec, t.msg, t.dropped = t.dropped, sec, msg, 0
	return dropped, true
}
