package sluicetest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// Reference is the algorithms run on a plain map under one mutex: the
// behaviour every store must reproduce. It never forgets a key unless
// Reset.
type Reference struct {
	mu sync.Mutex
	m  map[string]*sluice.State
}

// NewReference returns an empty Reference store.
func NewReference() *Reference { return &Reference{m: make(map[string]*sluice.State)} }

var (
	_ sluice.Store    = (*Reference)(nil)
	_ sluice.Refunder = (*Reference)(nil)
)

func (r *Reference) state(key string) *sluice.State {
	st := r.m[key]
	if st == nil {
		st = &sluice.State{}
		r.m[key] = st
	}
	return st
}

// Take implements sluice.Store.
func (r *Reference) Take(_ context.Context, q sluice.Request) (sluice.Decision, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d, _, err := step(r.state(q.Namespace+q.Key), &q)
	return d, err
}

// step is Take's state machine, or Charge's for a forced request.
func step(st *sluice.State, q *sluice.Request) (sluice.Decision, time.Time, error) {
	if q.Force {
		return q.Algorithm.Charge(st, q.Limit, q.Now, q.Cost)
	}
	return q.Algorithm.Take(st, q.Limit, q.Now, q.Cost)
}

// Refund implements sluice.Refunder: sluice.Algorithm.Refund on the key's
// state.
func (r *Reference) Refund(_ context.Context, q sluice.Request) (sluice.Decision, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d, _, err := q.Algorithm.Refund(r.state(q.Namespace+q.Key), q.Limit, q.Now, q.Cost)
	return d, err
}

// Reset implements sluice.Resetter.
func (r *Reference) Reset(_ context.Context, q sluice.Request) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, q.Namespace+q.Key)
	return nil
}

// TakeAll implements sluice.Store.
func (r *Reference) TakeAll(_ context.Context, qs []sluice.Request, ds []sluice.Decision) error {
	if len(ds) != len(qs) {
		return fmt.Errorf("sluicetest: reference: take all: %d decisions for %d requests", len(ds), len(qs))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	next := make(map[string]*sluice.State)
	for i, q := range qs {
		k := q.Namespace + q.Key
		st, ok := next[k]
		if !ok {
			c := r.state(k).Clone()
			st = &c
			next[k] = st
		}
		d, _, err := step(st, &q)
		if err != nil {
			return err
		}
		ds[i] = d
	}
	ok := true
	for i := range ds {
		ok = ok && (ds[i].Allowed || qs[i].Force) // a forced charge never fails the others
	}
	if ok {
		for k, st := range next {
			r.m[k] = st
		}
	}
	return nil
}
