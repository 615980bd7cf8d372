package rules

import "slices"

// source is what a Set was compiled from: a copy of the specs as they
// were, less their lines (which only the problems name), and the options.
// It lets a caller that compiled a config's rules to check them (config's
// Validate) hand the same Set to the daemon, which would otherwise compile
// them again (a tenth of a second for 25,000 rules), without handing it a
// stale Set when the specs were changed in Go since.
type source struct {
	specs []Spec
	o     Options
}

// newSource copies specs: their strings are shared (immutable), their
// lists copied into one array, so that changing the specs in place does
// not change the copy.
func newSource(specs []Spec, o Options) source {
	n := 0
	for i := range specs {
		n += len(specs[i].Match.Methods) + len(specs[i].Key)
	}
	// Not nil even when n is 0: an empty list and no list differ (key: []
	// is an error, no key is [ip]), and a slice of it is not nil.
	buf := make([]string, 0, n)
	own := func(l []string) []string {
		if l == nil {
			return nil
		}
		start := len(buf)
		buf = append(buf, l...)
		return buf[start:len(buf):len(buf)]
	}
	out := make([]Spec, len(specs)) // not nil: see CompiledFrom
	for i := range specs {
		sp := specs[i]
		sp.Line, sp.Lines = 0, nil
		sp.Match.Methods = own(sp.Match.Methods)
		sp.Key = own(sp.Key)
		if sp.Defer != nil {
			d := *sp.Defer
			sp.Defer = &d
		}
		out[i] = sp
	}
	return source{specs: out, o: o}
}

// CompiledFrom reports whether s was compiled from specs and o as they are
// now, their lines aside: whether compiling them again would make the same
// rules. It does not allocate, and takes a small fraction of the time a
// compile does. It is false for a Set Compile did not make.
func (s *Set) CompiledFrom(specs []Spec, o Options) bool {
	if s == nil || s.src.specs == nil || s.src.o != o || len(s.src.specs) != len(specs) {
		return false
	}
	for i := range specs {
		if !sameSpec(&s.src.specs[i], &specs[i]) {
			return false
		}
	}
	return true
}

// sameSpec reports whether a and b are the same rule as written, their
// lines aside. TestCompiledFromSeesEveryField fails when a field of Spec
// is left out here.
func sameSpec(a, b *Spec) bool {
	return a.Name == b.Name &&
		a.Match.Path == b.Match.Path &&
		a.Match.CaseInsensitive == b.Match.CaseInsensitive &&
		sameList(a.Match.Methods, b.Match.Methods) &&
		sameList(a.Key, b.Key) &&
		a.Rate == b.Rate &&
		a.Burst == b.Burst &&
		a.Segments == b.Segments &&
		a.Algorithm == b.Algorithm &&
		a.Action == b.Action &&
		a.MaxDelay == b.MaxDelay &&
		a.Sync == b.Sync &&
		a.Lease == b.Lease &&
		a.Shards == b.Shards &&
		(a.Defer == nil) == (b.Defer == nil) &&
		(a.Defer == nil || *a.Defer == *b.Defer)
}

// sameList is slices.Equal that tells nil from empty.
func sameList(a, b []string) bool {
	return (a == nil) == (b == nil) && slices.Equal(a, b)
}
