// This file holds the rate-limit response headers of the Envoy rate limit
// service: which descriptor's figures they carry, and their text.

package server

import (
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/engine"
)

// headerPick chooses the descriptor whose figures go into the headers:
// the one the client must wait for. Of the over-limit descriptors that
// deny the request, the longest wait; a quota_mode descriptor over its
// limit denies only while every quota descriptor is, so the request
// passes once the first of them frees: their shortest wait, when it is
// longer (or there is nothing else over). Else the tightest of the rest.
type headerPick struct {
	hard, quota, other  int // indexes + 1 (0: none)
	quotas, quotasOver  int
	hardWait, quotaWait time.Duration
}

func (p *headerPick) add(i int, quota bool, ss []*rlsv3.RateLimitResponse_DescriptorStatus, st []engine.DescriptorStatus) {
	a := ss[i]
	over := a.Code == rlsv3.RateLimitResponse_OVER_LIMIT
	if quota {
		p.quotas++
	}
	switch {
	case over && quota:
		p.quotasOver++
		if w := retryWait(a, st[i].Decision); p.quota == 0 || w < p.quotaWait {
			p.quota, p.quotaWait = i+1, w
		}
	case over:
		if w := retryWait(a, st[i].Decision); p.hard == 0 || w > p.hardWait {
			p.hard, p.hardWait = i+1, w
		}
	case p.other == 0 || tighter(a, ss[p.other-1]):
		p.other = i + 1
	}
}

// index returns the descriptor chosen, or -1 for none.
func (p *headerPick) index() int {
	switch {
	case p.hard != 0 && p.quota != 0 && p.quotasOver == p.quotas && p.quotaWait > p.hardWait:
		return p.quota - 1
	case p.hard != 0:
		return p.hard - 1
	case p.quota != 0:
		return p.quota - 1
	}
	return p.other - 1
}

// tighter reports whether status a, not over its limit, should be shown
// rather than b, as the HTTP edges choose the tightest rule: the least
// remaining, ties going to the one full again last.
func tighter(a, b *rlsv3.RateLimitResponse_DescriptorStatus) bool {
	if a.LimitRemaining != b.LimitRemaining {
		return a.LimitRemaining < b.LimitRemaining
	}
	return a.DurationUntilReset.AsDuration() > b.DurationUntilReset.AsDuration()
}

// retryWait is how long an over-limit descriptor tells the client to wait:
// its decision's RetryAfter, or, when it has none (a request it can never
// admit), its duration_until_reset.
func retryWait(ss *rlsv3.RateLimitResponse_DescriptorStatus, d sluice.Decision) time.Duration {
	if d.RetryAfter > 0 {
		return d.RetryAfter
	}
	return ss.DurationUntilReset.AsDuration()
}

func headers(ss *rlsv3.RateLimitResponse_DescriptorStatus, d sluice.Decision, over bool) []*corev3.HeaderValue {
	limit := strconv.FormatUint(uint64(ss.CurrentLimit.GetRequestsPerUnit()), 10)
	remaining := strconv.FormatUint(uint64(ss.LimitRemaining), 10)
	reset := strconv.FormatInt(ceilSeconds(ss.DurationUntilReset.AsDuration()), 10)
	hs := []*corev3.HeaderValue{
		{Key: "RateLimit-Limit", Value: limit},
		{Key: "RateLimit-Remaining", Value: remaining},
		{Key: "RateLimit-Reset", Value: reset},
		{Key: "X-RateLimit-Limit", Value: limit},
		{Key: "X-RateLimit-Remaining", Value: remaining},
		{Key: "X-RateLimit-Reset", Value: reset},
	}
	if over {
		retry := retryWait(ss, d)
		// At least 1, as the HTTP edges answer: 0 (a request that can
		// never be admitted, on a key with nothing to reset) would invite
		// an immediate retry.
		ra := strconv.FormatInt(max(ceilSeconds(retry), 1), 10)
		hs = append(hs, &corev3.HeaderValue{Key: "Retry-After", Value: ra}, &corev3.HeaderValue{Key: "X-RateLimit-Retry-After", Value: ra})
	}
	return hs
}

func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}
