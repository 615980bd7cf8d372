package httplimit

import (
	"errors"
	"strconv"
	"sync"
)

// RetryBudget bounds the retries of every request that shares it to a
// fraction of the requests recently answered, as gRPC's retry throttling
// does. It holds tokens, at most maxTokens and that many at the start: each
// 429/503 answer to a request the transport may retry takes one (one never
// retried, such as a plain POST or any request of a transport with
// MaxAttempts 1, takes none), each success (an answer below 400) gives back
// ratio, and a retry is allowed only while more than half of maxTokens
// remain. Other error answers (404, 500…), which are not retried, neither
// take nor give back, as gRPC counts only retryable failures and OK
// answers. Under a lasting
// overload a client therefore retries about once per 1/ratio answers that
// succeed, and not at all while nothing succeeds, instead of multiplying
// its load by its attempts.
//
// The zero value is the default budget, DefaultRetryTokens tokens earning
// DefaultRetryRatio; NewRetryBudget makes others. A RetryBudget is safe
// for concurrent use and must not be copied after first use. Share one
// among the transports that should be bounded together.
type RetryBudget struct {
	mu sync.Mutex
	// In thousandths of a token, as gRPC counts them, so that ratio
	// steps add up exactly.
	milli, maxMilli, gain int64
}

// NewRetryBudget returns a full budget of maxTokens tokens (3 to 1000)
// where each success (an answer below 400) earns ratio of a token (above 0,
// at most 1, counted in thousandths). 1 or 2 tokens are refused: the 429
// before a retry takes one, which leaves no more than half of them, so
// such a budget would never allow a retry (MaxAttempts 1 turns retries
// off).
func NewRetryBudget(ratio float64, maxTokens int) (*RetryBudget, error) {
	if !(ratio >= 0.001 && ratio <= 1) {
		return nil, errors.New("httplimit: retry budget ratio must be 0.001 to 1, got " + strconv.FormatFloat(ratio, 'g', -1, 64))
	}
	if maxTokens == 1 || maxTokens == 2 {
		return nil, errors.New("httplimit: retry budget tokens must be 3 to 1000, got " + strconv.Itoa(maxTokens) +
			": a budget of 1 or 2 would never allow a retry (the 429 before it takes one, leaving no more than half)")
	}
	if maxTokens < 3 || maxTokens > 1000 {
		return nil, errors.New("httplimit: retry budget tokens must be 3 to 1000, got " + strconv.Itoa(maxTokens))
	}
	m := int64(maxTokens) * 1000
	return &RetryBudget{milli: m, maxMilli: m, gain: int64(ratio*1000 + 0.5)}, nil
}

// Tokens returns the tokens left; retries are allowed while it is above
// half the maximum.
func (b *RetryBudget) Tokens() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.init()
	return float64(b.milli) / 1000
}

func (b *RetryBudget) failed() {
	b.mu.Lock()
	b.init()
	b.milli = max(b.milli-1000, 0)
	b.mu.Unlock()
}

func (b *RetryBudget) succeeded() {
	b.mu.Lock()
	b.init()
	b.milli = min(b.milli+b.gain, b.maxMilli)
	b.mu.Unlock()
}

func (b *RetryBudget) allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.init()
	return b.milli > b.maxMilli/2
}

// init makes a zero RetryBudget the default one, full; b.mu is held.
func (b *RetryBudget) init() {
	if b.maxMilli == 0 {
		b.maxMilli = DefaultRetryTokens * 1000
		b.milli = b.maxMilli
		b.gain = int64(DefaultRetryRatio * 1000)
	}
}
