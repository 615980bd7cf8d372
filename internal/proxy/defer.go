package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"

	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/hop"
	"github.com/sluicehq/sluice/internal/rules"
)

// deferRequest queues r on the rule that denied it and answers 202 (503
// when it cannot tell whether r was queued; 408 or 400, as forward does,
// when r's body cannot be read whole); it returns false (nothing written)
// when r must be refused as without defer. r is queued under the
// key that denied it (res.DeniedKey: of a rule counting r under several
// keys, the first that denied), with the rule's other keys of r beside it,
// so that its replay waits for every one of them. Queued, it charges the
// shadow rules of ms (Engine.Queued). Its other enforcing rules were
// charged by Engine.AdmitOrDefer; not queued (413, the queue full, Redis
// refusing it, or refused as without defer), they are given that charge
// back (Engine.NotQueued). Maybe queued (the outcome unknown), they keep
// it.
func (p *Proxy) deferRequest(w http.ResponseWriter, r *http.Request, ip netip.Addr, e *engine.Engine, res *engine.Result, ms []rules.Match) bool {
	kept := false // queued, or maybe: the charge stays
	defer func() {
		if !kept {
			e.NotQueued(r.Context(), res)
		}
	}()
	rule := p.o.Defer.Rule(res.DeniedBy.Name)
	if rule == nil || res.DeniedKey == "" {
		return false
	}
	keys := []string{res.DeniedKey}
	for i := range ms {
		if ms[i].Rule == res.DeniedBy && !slices.Contains(keys, ms[i].Key) {
			keys = append(keys, ms[i].Key)
		}
	}
	body, release, err := p.o.Defer.ReadBody(r, rule)
	defer release()
	if err != nil {
		if errors.Is(err, deferq.ErrBodyTooLarge) {
			res.SetHeaders(w.Header())
			h := w.Header()
			h["Content-Type"] = []string{"application/json"}
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			b, _ := json.Marshal(map[string]any{"error": "body_too_large", "rule": rule.Name,
				"message": "over the rate limit, and the body is too large to be deferred (defer.max_body_bytes is " + strconv.FormatInt(rule.MaxBody(), 10) + ")"})
			w.Write(append(b, '\n'))
			return true
		}
		if !errors.Is(err, deferq.ErrBusy) {
			// The client's body could not be read whole (stalled past
			// body_read_timeout, malformed chunked, cut off): nothing is
			// queued, and the answer is the one forward gives such a
			// body, 408 or 400, its connection closed, not a 429 that
			// tells the client to send again later.
			p.fail(w, r, res, fmt.Errorf("%w: %w", errClientBody, err))
			return true
		}
		return false
	}
	// The client's hop-by-hop headers go before the proxy's own are set,
	// as ReverseProxy drops them before Rewrite: a Connection header that
	// names X-Forwarded-For would otherwise have the queue drop the
	// proxy's (it drops what Connection names), and the replay go without.
	h := r.Header.Clone()
	hop.Drop(h)
	var trust peerTrust
	for k := range h {
		if proxyHeader(k) || underscoredHop(k) || clientIPHeader(k) && !trust.passes(p, r) {
			delete(h, k)
		}
	}
	if ip.IsValid() {
		a := ip.String()
		h["X-Forwarded-For"] = []string{a}
		h["X-Real-Ip"] = []string{a}
	}
	f := p.forwarded(r, &trust)
	h["X-Forwarded-Host"] = []string{f.host}
	h["X-Forwarded-Proto"] = []string{f.proto}
	if f.port != "" {
		h["X-Forwarded-Port"] = []string{f.port}
	}
	h["Forwarded"] = []string{forwardedValue(ip, f.host, f.proto)}
	id, err := p.o.Defer.Enqueue(r.Context(), rule.Name, keys, r, h, body)
	var unknown *deferq.OutcomeUnknownError
	if errors.As(err, &unknown) {
		kept = true
		// Maybe queued: a 429 would have the client send it again.
		p.logDefer(rule.Name, err)
		res.SetHeaders(w.Header())
		deferq.WriteOutcomeUnknown(w, rule.Name, unknown.ID)
		return true
	}
	if err != nil {
		if !errors.Is(err, deferq.ErrQueueFull) && !errors.Is(err, deferq.ErrHeadTooLarge) && r.Context().Err() == nil { // the client's doing (or gone), or the rule's
			p.logDefer(rule.Name, err)
		}
		return false
	}
	kept = true
	// Served later: the shadow rules it matched are charged now, once
	// (the replay asks the defer rule alone), even if the client has
	// gone meanwhile, since its request is queued.
	e.Queued(context.WithoutCancel(r.Context()), ms, 1)
	res.SetHeaders(w.Header())
	deferq.WriteAccepted(w, id)
	return true
}

// admit is e.Admit, or e.AdmitOrDefer when the proxy has a queue for
// action defer: a request it may queue passes its other enforcing rules
// first, charged then, as an admitted request would be.
func (p *Proxy) admit(ctx context.Context, e *engine.Engine, ms []rules.Match) engine.Result {
	if p.o.Defer != nil {
		return e.AdmitOrDefer(ctx, ms, 1)
	}
	return e.Admit(ctx, ms, 1)
}
