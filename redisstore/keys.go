package redisstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice"
)

// Key returns the Redis key that holds the state of limiter key k:
// Prefix + "{" + k + "}", where a backslash in k is written as two and a
// "}" as a backslash and ")", so that the whole of k is the Cluster hash tag.
func (s *Store) Key(k string) string {
	if strings.ContainsAny(k, `}\`) {
		k = tagEscaper.Replace(k)
	}
	return s.opts.Prefix + "{" + k + "}"
}

// tagEscaper escapes a limiter key for a hash tag, injectively: a
// backslash starts every escape, and no escape contains "}".
var tagEscaper = strings.NewReplacer(`\`, `\\`, "}", `\)`)

// KeyOf returns the Redis key that holds the state of r.Namespace+r.Key:
// Prefix + Namespace + "{" + Key + "}", escaped as Key escapes.
func (s *Store) KeyOf(r *sluice.Request) string {
	if r.Namespace == "" {
		return s.Key(r.Key)
	}
	ns := r.Namespace
	if strings.ContainsAny(ns, `{}\`) {
		ns = nsEscaper.Replace(ns)
	}
	k := r.Key
	if strings.ContainsAny(k, `}\`) {
		k = tagEscaper.Replace(k)
	}
	return s.opts.Prefix + ns + "{" + k + "}"
}

// nsEscaper escapes a namespace, injectively and without braces.
var nsEscaper = strings.NewReplacer(`\`, `\\`, "}", `\)`, "{", `\(`)

// Reset deletes the Redis key of r (sluice.Resetter): its next request
// finds it new. A failure wraps sluice.ErrStoreUnavailable.
func (s *Store) Reset(ctx context.Context, r sluice.Request) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	if err := s.c.Do(ctx, s.c.B().Del().Key(s.KeyOf(&r)).Build()).Error(); err != nil {
		return fmt.Errorf("redisstore: reset %q: %w: %w", r.Key, sluice.ErrStoreUnavailable, err)
	}
	return nil
}
