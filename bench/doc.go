// Package bench compares Sluice's memstore with other Go rate limiters on
// the same key patterns, in one `go test -bench` run. It is its own module
// (github.com/sluicehq/sluice/bench) so that the peers it imports never
// become dependencies of Sluice.
//
// Every benchmark family has one sub-benchmark per contender, named so that
// rows line up side by side:
//
//	BenchmarkHotKey/sluice-gcra      one key, every request admitted
//	BenchmarkHotKey/xtimerate        one *rate.Limiter, AllowN(t, 1)
//	BenchmarkHotKeyDeny/…            one exhausted key, every request denied
//	BenchmarkKeys1M/…                1,000,000 keys held by the limiter, each
//	                                 operation on the next key
//	BenchmarkMemory1M/…              heap per key after filling 1,000,000 keys
//
// plus the same with RunParallel (…Parallel). Run ./run.sh from this
// directory; docs/bench-core.md in the main module holds the figures.
package bench
