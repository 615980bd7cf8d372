package redisstore

import "github.com/redis/rueidis"

// Client returns the Store's Redis connection, for daemon features that
// keep other data beside the counters (the deferral queue's streams). Do
// not close it: Close does.
func (s *Store) Client() rueidis.Client { return s.c }

// KeyPrefix returns the prefix of every key of the Store (Options.Prefix,
// defaulted).
func (s *Store) KeyPrefix() string { return s.opts.Prefix }
