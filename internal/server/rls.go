// This file is the Envoy rate limit service (gRPC v3):
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, and its HTTP
// form POST /json. The protocol types stay in this package.

package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/jsonstr"
	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/logthrottle"
	"github.com/sluicehq/sluice/internal/metrics"
)

// Bounds on one rate limit request.
const (
	MaxDescriptors = 64 // descriptors per request
	MaxEntries     = 64 // entries per descriptor
)

// RLSOptions configures the Envoy rate limit service. Engine and
// Descriptors are required.
type RLSOptions struct {
	// Engine returns the engine in force (its store, on_error policy and
	// metrics decide the descriptors). Called once per request.
	Engine func() *engine.Engine
	// Descriptors returns the descriptor config in force, or nil while
	// there is none yet (answered UNAVAILABLE). Called once per
	// request; the daemon swaps it atomically on reload.
	Descriptors func() *descriptors.Set
	// Metrics receives the per-domain, per-descriptor counters; nil
	// records nothing.
	Metrics *metrics.Metrics
	// Headers adds the rate-limit response headers to every answer with a
	// limit (response_headers_to_add): RateLimit-Limit, RateLimit-Remaining,
	// RateLimit-Reset (as the reference service names them),
	// X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, and
	// Retry-After and X-RateLimit-Retry-After when over the limit; the
	// figures are the tightest descriptor's.
	Headers bool
	// Shadow puts the whole service in shadow mode (the reference
	// service's SHADOW_MODE): every descriptor is decided as one with
	// shadow_mode, counted and reported but never denying; a status over
	// its limit still says OVER_LIMIT. A store failure is still answered
	// as on_error says.
	Shadow bool
	// Quota puts the whole service in quota mode (the reference service's
	// QUOTA_MODE): every descriptor is decided as one with quota_mode, a
	// request being over the limit only when all its descriptors are (one
	// without a limit counting as one under it).
	Quota bool
	// Unavailable answers gRPC UNAVAILABLE (and 503 on /json) when the
	// store cannot decide, instead of the engine's on_error answer, so
	// that Envoy's failure_mode_deny decides.
	Unavailable bool
	// Now is the clock of the log throttle; nil means time.Now. Decisions
	// and reset times use the engine's clock.
	Now func() time.Time
	// MaxBodyBytes bounds a /json body; 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Logger receives bad requests (at most one a second); nil discards.
	Logger *slog.Logger
}

// RLS is the Envoy rate limit service. It is safe for concurrent use.
type RLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	o      RLSOptions
	envoy  *metrics.Envoy
	badLog logthrottle.Throttle
}

// NewRLS returns the rate limit service for o.
func NewRLS(o RLSOptions) (*RLS, error) {
	if o.Engine == nil || o.Descriptors == nil {
		return nil, errors.New("server: RLSOptions needs Engine and Descriptors")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &RLS{o: o, envoy: o.Metrics.Envoy()}, nil
}

// errStore marks a store failure answered as UNAVAILABLE.
var errStore = errors.New("store unavailable")

// errNoConfig is the answer, UNAVAILABLE, while Descriptors returns nil:
// no descriptor config yet, so that Envoy's failure_mode_deny decides, as
// it does while the reference service waits for its first config from
// an xDS server (it does not listen until then).
var errNoConfig = errors.New("no descriptor config yet: the xDS server has sent none")

// ShouldRateLimit implements envoy.service.ratelimit.v3.RateLimitService.
func (s *RLS) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, err := s.decide(ctx, req)
	switch {
	case err == nil:
		return resp, nil
	case errors.Is(err, errStore), errors.Is(err, errNoConfig):
		return nil, status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled):
		return nil, status.FromContextError(err).Err()
	default:
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
}

// decide answers one request; its errors are bad requests, wrap errStore,
// or are context.Canceled (the client went away before the store answered).
func (s *RLS) decide(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if err := validate(req); err != nil {
		if s.badLog.OK(s.o.Now()) {
			s.o.Logger.Info("bad rate limit request", "err", err, "suppressed", s.badLog.Dropped())
		}
		return nil, err
	}
	set := s.o.Descriptors()
	if set == nil {
		return nil, errNoConfig
	}
	domain := req.GetDomain()
	sc := getScratch(len(req.Descriptors))
	defer putScratch(sc)
	ds, st := sc.ds, sc.st
	if set.HasDomain(domain) {
		var replaced map[string]bool
		for i, d := range req.Descriptors {
			entries := sc.entries[:0]
			for _, e := range d.Entries {
				entries = append(entries, descriptors.Entry{Key: e.GetKey(), Value: e.GetValue()})
			}
			sc.entries = entries
			var m descriptors.Match
			if o := d.GetLimit(); o != nil {
				// By number, as the unit of the answer, as the reference
				// service reads it: Envoy's type.v3.RateLimitUnit numbers
				// the units as that enum does, which has WEEK (7) too.
				pu := rlsv3.RateLimitResponse_RateLimit_Unit(o.GetUnit())
				u, known := descriptors.ParseUnit(pu.String())
				if !known {
					return nil, fmt.Errorf("descriptors[%d].limit: unit %s is not one of SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR", i, pu)
				}
				r, ok := descriptors.Override(domain, o.GetRequestsPerUnit(), u, o.GetUnitMultiplier().GetValue())
				if !ok {
					return nil, fmt.Errorf("descriptors[%d].limit: %s × %d (unit_multiplier) is not a countable period", i, pu, o.GetUnitMultiplier().GetValue())
				}
				m = descriptors.OverrideMatch(r, entries)
			} else {
				set.Lookup(domain, entries, &m)
			}
			if m.Rule == nil {
				continue
			}
			for _, name := range m.Rule.Replaces {
				if replaced == nil {
					replaced = map[string]bool{}
				}
				replaced[name] = true
			}
			ds[i] = engine.Descriptor{Rule: m.Rule, Cost: hits(req, d), Shadow: s.o.Shadow, Negative: d.GetIsNegativeHits()}
			if !m.Rule.Unlimited && m.Rule.RequestsPerUnit > 0 {
				ds[i].Key = m.StoreKey(entries)
			}
			ds[i].Metrics = s.metricsOf(domain, &m)
		}
		// A limit named in another matched limit's replaces is dropped; an
		// unlimited one stays unlimited, as in the reference service (it
		// marks those before it drops the replaced).
		for i := range ds {
			if r := ds[i].Rule; r != nil && !r.Unlimited && r.Name != "" && replaced[r.Name] {
				ds[i] = engine.Descriptor{}
			}
		}
	} else {
		s.envoy.UnknownDomain()
	}
	if s.o.Quota {
		// Every descriptor, one without a limit included (never over), as
		// the reference service's QUOTA_MODE counts them.
		for i := range ds {
			ds[i].Quota = true
		}
	}
	res := s.o.Engine().DecideDescriptors(ctx, ds, st)
	if res.Err != nil { // the client went away before the store answered
		return nil, res.Err
	}
	if res.StoreErr != nil && s.o.Unavailable {
		return nil, fmt.Errorf("%w: %v", errStore, res.StoreErr)
	}
	return s.response(ds, st, res), nil
}

// metricsOf returns the counters of a match: those of its rule, resolved
// once and kept on the rule, unless the label carries request values.
func (s *RLS) metricsOf(domain string, m *descriptors.Match) *metrics.EnvoyDescriptor {
	if s.envoy == nil {
		return nil
	}
	if m.Detailed {
		return s.envoy.Descriptor(domain, m.Metric, true)
	}
	if c, ok := m.Rule.Cached().(*metrics.EnvoyDescriptor); ok {
		return c
	}
	c := s.envoy.Descriptor(domain, m.Metric, false)
	m.Rule.SetCached(c)
	return c
}

// scratch is the per-request working memory of decide, pooled.
type scratch struct {
	ds      []engine.Descriptor
	st      []engine.DescriptorStatus
	entries []descriptors.Entry
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

func getScratch(n int) *scratch {
	sc := scratches.Get().(*scratch)
	if cap(sc.ds) < n {
		sc.ds = make([]engine.Descriptor, n)
		sc.st = make([]engine.DescriptorStatus, n)
	}
	sc.ds, sc.st = sc.ds[:n], sc.st[:n]
	return sc
}

func putScratch(sc *scratch) {
	clear(sc.ds)
	clear(sc.st)
	clear(sc.entries)
	scratches.Put(sc)
}

// hits returns what descriptor d of req asks for: its own hits_addend
// (0 checks without counting), else the request's (0 means 1); with
// is_negative_hits, what it gives back.
func hits(req *rlsv3.RateLimitRequest, d *commonv3.RateLimitDescriptor) int64 {
	if h := d.GetHitsAddend(); h != nil {
		return int64(h.GetValue()) // validate bounds it
	}
	return int64(max(1, req.GetHitsAddend()))
}

func validate(req *rlsv3.RateLimitRequest) error {
	switch {
	case req.GetDomain() == "":
		return errors.New("domain must not be empty")
	case len(req.GetDescriptors()) == 0:
		return errors.New("descriptors must not be empty")
	case len(req.GetDescriptors()) > MaxDescriptors:
		return fmt.Errorf("too many descriptors: at most %d per request", MaxDescriptors)
	}
	for i, d := range req.Descriptors {
		if d == nil {
			return fmt.Errorf("descriptors[%d] is null", i)
		}
		if len(d.Entries) > MaxEntries {
			return fmt.Errorf("descriptors[%d]: too many entries, at most %d", i, MaxEntries)
		}
		if h := d.GetHitsAddend(); h != nil && h.GetValue() > math.MaxInt64/2 {
			return fmt.Errorf("descriptors[%d]: hits_addend %d is too large", i, h.GetValue())
		}
	}
	return nil
}

// response builds the answer from the decisions.
func (s *RLS) response(ds []engine.Descriptor, st []engine.DescriptorStatus, res engine.DescriptorsResult) *rlsv3.RateLimitResponse {
	now := res.Now
	resp, parts := newResponse(len(ds))
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	if res.OverLimit {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	var pick headerPick
	// No headers when the store could not decide: nothing is known of the
	// counters (the HTTP middleware fails open without them too).
	withHeaders := s.o.Headers && res.StoreErr == nil
	for i := range ds {
		r := ds[i].Rule
		ss := &parts[i].status
		ss.Code = rlsv3.RateLimitResponse_OK
		resp.Statuses[i] = ss
		switch {
		case r == nil:
			continue
		case r.Unlimited:
			ss.LimitRemaining = math.MaxUint32
			continue
		case ds[i].Negative && !st[i].Asked && r.RequestsPerUnit > 0:
			// A refund the store could not make: OK whatever on_error
			// says (a refund never denies), with no limit nor figures,
			// nor headers (nothing is known of its counter). A quota
			// one is still one of the quota descriptors, never over.
			if withHeaders && (r.Quota || s.o.Quota) {
				pick.quotas++
			}
			continue
		case res.StoreErr != nil && !st[i].Asked && r.RequestsPerUnit > 0:
			// The store could not decide it: the on_error answer, with no
			// limit nor figures (nothing is known of its counter).
			if res.OverLimit {
				ss.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			}
			continue
		}
		ss.CurrentLimit = &parts[i].limit
		ss.CurrentLimit.Name = r.Name
		ss.CurrentLimit.RequestsPerUnit = r.RequestsPerUnit
		ss.CurrentLimit.Unit = protoUnit[r.Unit]
		if r.UnitMultiplier > 1 {
			ss.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(r.UnitMultiplier)
		}
		if st[i].Over && !r.Shadow {
			ss.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		d := st[i].Decision
		ss.LimitRemaining = uint32(min(max(d.Remaining, 0), math.MaxUint32))
		if st[i].Over {
			ss.LimitRemaining = 0
		}
		// Whole seconds, rounded up, as the reference service answers:
		// Envoy reads only the seconds (its X-RateLimit-Reset), so a
		// fraction would send clients back before the window ends.
		ss.DurationUntilReset = &parts[i].reset
		ss.DurationUntilReset.Seconds = ceilSeconds(untilReset(r, d, now))
		if withHeaders {
			pick.add(i, r.Quota || s.o.Quota, resp.Statuses, st)
		}
	}
	if tight := pick.index(); tight >= 0 {
		resp.ResponseHeadersToAdd = headers(resp.Statuses[tight], st[tight].Decision, resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT)
	}
	return resp
}

// statusParts is one descriptor's status in a response and the messages
// it points to, made together: one allocation for every descriptor's,
// where each status, limit and reset was one.
type statusParts struct {
	status rlsv3.RateLimitResponse_DescriptorStatus
	limit  rlsv3.RateLimitResponse_RateLimit
	reset  durationpb.Duration
}

// oneStatus is a response of one descriptor, the commonest, with its
// status and its parts, made in one allocation.
type oneStatus struct {
	resp     rlsv3.RateLimitResponse
	statuses [1]*rlsv3.RateLimitResponse_DescriptorStatus
	parts    [1]statusParts
}

// newResponse returns a response with room for n statuses, and their
// parts: one allocation for one descriptor, three for more.
func newResponse(n int) (*rlsv3.RateLimitResponse, []statusParts) {
	if n == 1 {
		one := new(oneStatus)
		one.resp.Statuses = one.statuses[:]
		return &one.resp, one.parts[:]
	}
	return &rlsv3.RateLimitResponse{Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)}, make([]statusParts, n)
}

// protoUnit maps a descriptors.Unit to Envoy's enum.
var protoUnit = [...]rlsv3.RateLimitResponse_RateLimit_Unit{
	descriptors.Second: rlsv3.RateLimitResponse_RateLimit_SECOND,
	descriptors.Minute: rlsv3.RateLimitResponse_RateLimit_MINUTE,
	descriptors.Hour:   rlsv3.RateLimitResponse_RateLimit_HOUR,
	descriptors.Day:    rlsv3.RateLimitResponse_RateLimit_DAY,
	descriptors.Week:   rlsv3.RateLimitResponse_RateLimit_WEEK,
	descriptors.Month:  rlsv3.RateLimitResponse_RateLimit_MONTH,
	descriptors.Year:   rlsv3.RateLimitResponse_RateLimit_YEAR,
}

// untilReset is duration_until_reset before rounding: for a fixed window,
// the time to the end of the epoch-aligned window (as the reference
// service computes it, whatever the count); for the other algorithms, the
// time until the limit is full again.
func untilReset(r *descriptors.Rule, d sluice.Decision, now time.Time) time.Duration {
	p := r.Limit.Period
	if p <= 0 {
		p = r.Period()
	}
	if r.Algorithm == sluice.FixedWindow || r.Limit.Rate == 0 {
		us := now.UnixMicro()
		pu := p.Microseconds()
		return time.Duration(pu-us%pu) * time.Microsecond
	}
	return max(d.ResetAfter, 0)
}

var (
	jsonOut = protojson.MarshalOptions{UseProtoNames: false}
	jsonIn  = protojson.UnmarshalOptions{DiscardUnknown: false}
)

// ServeJSON serves POST /json: the request as proto-JSON, answered 200
// (OK) or 429 (OVER_LIMIT) with the response as proto-JSON; 400 for a bad
// request, 408 for a body stalled past body_read_timeout, 413 for one over
// MaxBodyBytes, 415 for one with a Content-Encoding (encodingError), 503 when the store cannot decide under Unavailable, 499 when the
// client went away before the store answered.
func (s *RLS) ServeJSON(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		jsonError(w, http.StatusMethodNotAllowed, "method not allowed (want POST)")
		return
	}
	if ee := encodingError(r); ee != nil {
		w.Header()["Accept-Encoding"] = identity
		jsonError(w, ee.status, ee.msg)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.o.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			jsonError(w, http.StatusRequestEntityTooLarge, "request body larger than "+strconv.FormatInt(mbe.Limit, 10)+" bytes")
			return
		}
		if errors.Is(err, listener.ErrBodyTimeout) {
			jsonError(w, errBodyTimeout.status, errBodyTimeout.msg) // as /v1/check
			return
		}
		jsonError(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	var req rlsv3.RateLimitRequest
	if err := jsonIn.Unmarshal(body, &req); err != nil {
		jsonError(w, http.StatusBadRequest, "not a RateLimitRequest in proto-JSON: "+msgCut(err.Error()))
		return
	}
	resp, err := s.decide(r.Context(), &req)
	if err != nil {
		code, msg := http.StatusBadRequest, err.Error()
		switch {
		case errors.Is(err, errStore), errors.Is(err, errNoConfig):
			code = http.StatusServiceUnavailable
		case errors.Is(err, context.Canceled):
			code, msg = StatusClientClosedRequest, errGone.msg
		}
		jsonError(w, code, msg)
		return
	}
	out, err := jsonOut.Marshal(resp)
	if err != nil {
		jsonError(w, http.StatusInternalServerError, "internal error")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	w.Write(out)
}

func jsonError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(appendJSONError(nil, msg))
}

func appendJSONError(b []byte, msg string) []byte {
	b = append(b, `{"error":`...)
	b = jsonstr.Append(b, msg)
	return append(b, "}\n"...)
}
