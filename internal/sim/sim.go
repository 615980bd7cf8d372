// Package sim replays a trace of requests through a sluice.Store: the engine
// of `sluice simulate`.
//
// A trace is text, one request per line, "t,key[,cost]" (see Reader). Run
// sends each request to the store at the trace's time, in order, and writes
// one CSV line per request:
//
//	t,key,cost,allowed,remaining,retry_after,delay
//
// Times and durations are seconds with six decimals (they are whole
// microseconds); a retry_after of -1 means never (the cost exceeds what the
// limit can ever admit at once); a key that holds a '"' is quoted as CSV
// quotes it. The output depends only on the trace, the algorithm and the
// limit, so every store prints the same bytes.
package sim

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice"
)

// Header is the first line Run writes.
const Header = "t,key,cost,allowed,remaining,retry_after,delay"

// Options configures Run.
type Options struct {
	Algorithm sluice.Algorithm
	Limit     sluice.Limit
	// Store decides the requests; every key of the trace is used as is, so
	// give Run a store (or a key space) of its own.
	Store sluice.Store
	// Record keeps every request and its decision in Summary.Events, which
	// Plot needs. Memory then grows with the trace.
	Record bool
}

// Event is one request of the trace and the store's decision.
type Event struct {
	Request
	Decision sluice.Decision
}

// KeyCount counts the requests of one key.
type KeyCount struct {
	Key                          string
	Requests, Admitted, Rejected int64
}

// Summary describes a run.
type Summary struct {
	Trace     string // the trace's name
	Algorithm sluice.Algorithm
	Limit     sluice.Limit
	// Requests = Admitted + Rejected, counted in requests (not cost).
	Requests, Admitted, Rejected int64
	// First and Last are the times of the first and last request, in
	// microseconds since the epoch; both 0 for an empty trace.
	First, Last int64
	// MaxDelay is the longest delay given to an admitted request (only the
	// leaky bucket delays).
	MaxDelay time.Duration
	// Keys counts per key, sorted by key.
	Keys []KeyCount
	// Events holds every request and decision, in trace order, when
	// Options.Record is set.
	Events []Event
}

// Run replays trace (named traceName in errors) through opt.Store and writes
// the header and one line per request to out. Bad input stops the run with a
// *LineError; the lines before it have been written. A store error is
// returned wrapped with the line it failed on.
func Run(ctx context.Context, opt Options, trace io.Reader, traceName string, out io.Writer) (*Summary, error) {
	if opt.Store == nil {
		return nil, errors.New("sim: no store")
	}
	if !opt.Algorithm.Valid() {
		return nil, fmt.Errorf("sim: %w: %d", sluice.ErrUnknownAlgorithm, uint8(opt.Algorithm))
	}
	if err := opt.Algorithm.ValidateLimit(opt.Limit); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	sum := &Summary{Trace: traceName, Algorithm: opt.Algorithm, Limit: opt.Limit}
	w := bufio.NewWriterSize(out, 64<<10)
	err := run(ctx, opt, NewReader(trace, traceName), w, sum)
	if ferr := w.Flush(); err == nil && ferr != nil {
		err = fmt.Errorf("sim: write: %w", ferr)
	}
	return sum, err
}

func run(ctx context.Context, opt Options, rd *Reader, w *bufio.Writer, sum *Summary) error {
	if _, err := w.WriteString(Header + "\n"); err != nil {
		return fmt.Errorf("sim: write: %w", err)
	}
	keys := make(map[string]*KeyCount)
	defer func() {
		sum.Keys = make([]KeyCount, 0, len(keys))
		for _, k := range keys {
			sum.Keys = append(sum.Keys, *k)
		}
		slices.SortFunc(sum.Keys, func(a, b KeyCount) int { return cmp.Compare(a.Key, b.Key) })
	}()
	buf := make([]byte, 0, 256)
	for n := 0; ; n++ {
		if n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("sim: %w", err)
			}
		}
		req, err := rd.Read()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		d, err := opt.Store.Take(ctx, sluice.Request{
			Key:       req.Key,
			Algorithm: opt.Algorithm,
			Limit:     opt.Limit,
			Cost:      req.Cost,
			Now:       time.UnixMicro(req.Micros),
		})
		if err != nil {
			return fmt.Errorf("sim: %s:%d: take %q: %w", rd.name, req.Line, req.Key, err)
		}
		kc := keys[req.Key]
		if kc == nil {
			kc = &KeyCount{Key: req.Key}
			keys[req.Key] = kc
		}
		kc.Requests++
		sum.Requests++
		if d.Allowed {
			kc.Admitted++
			sum.Admitted++
			sum.MaxDelay = max(sum.MaxDelay, d.Delay)
		} else {
			kc.Rejected++
			sum.Rejected++
		}
		if sum.Requests == 1 {
			sum.First = req.Micros
		}
		sum.Last = req.Micros
		if opt.Record {
			sum.Events = append(sum.Events, Event{Request: req, Decision: d})
		}
		buf = appendLine(buf[:0], &req, &d)
		if _, err := w.Write(buf); err != nil {
			return fmt.Errorf("sim: write: %w", err)
		}
	}
}

func appendLine(b []byte, r *Request, d *sluice.Decision) []byte {
	b = appendTime(b, r.Micros)
	b = append(b, ',')
	b = appendKey(b, r.Key)
	b = append(b, ',')
	b = strconv.AppendInt(b, r.Cost, 10)
	if d.Allowed {
		b = append(b, ",1,"...)
	} else {
		b = append(b, ",0,"...)
	}
	b = strconv.AppendInt(b, d.Remaining, 10)
	b = append(b, ',')
	b = appendDuration(b, d.RetryAfter)
	b = append(b, ',')
	b = appendDuration(b, d.Delay)
	return append(b, '\n')
}

// appendKey writes a key as a CSV field: as it is, or, when it holds a
// '"', quoted with its quotes doubled (RFC 4180), so that a CSV reader
// reads back the key itself. A key holds no comma, newline or carriage
// return (Reader refuses them), and no leading or trailing space.
func appendKey(b []byte, k string) []byte {
	if !strings.Contains(k, `"`) {
		return append(b, k...)
	}
	b = append(b, '"')
	for {
		i := strings.IndexByte(k, '"')
		if i < 0 {
			break
		}
		b = append(b, k[:i+1]...)
		b = append(b, '"')
		k = k[i+1:]
	}
	b = append(b, k...)
	return append(b, '"')
}

// Describe names the algorithm and the parts of the limit it uses, such as
// "sliding_window_counter 10/m" or "token_bucket 5/s burst 10".
func Describe(a sluice.Algorithm, l sluice.Limit) string {
	s := a.String() + " " + l.String()
	switch a {
	case sluice.TokenBucket, sluice.GCRA, sluice.LeakyBucket:
		s += " burst " + strconv.FormatInt(l.BurstOrRate(), 10)
	case sluice.SlidingWindowCounter:
		if l.Segments > 1 {
			s += " segments " + strconv.Itoa(l.Segments)
		}
	}
	return s
}

// Print writes s for a person: the totals, then one line per key.
func (s *Summary) Print(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s, trace %s\n", Describe(s.Algorithm, s.Limit), s.Trace)
	fmt.Fprintf(tw, "%d requests, %d admitted, %d rejected", s.Requests, s.Admitted, s.Rejected)
	if s.Algorithm == sluice.LeakyBucket {
		fmt.Fprintf(tw, ", longest delay %ss", FormatDuration(s.MaxDelay))
	}
	fmt.Fprint(tw, "\n\nrequests\tadmitted\trejected\t  key\n")
	for _, k := range s.Keys {
		fmt.Fprintf(tw, "%d\t%d\t%d\t  %s\n", k.Requests, k.Admitted, k.Rejected, k.Key)
	}
	return tw.Flush()
}
