package server

import (
	"math"
	"strconv"
)

// int reads a JSON number that must be a whole number within int64,
// however it is spelled: 10, 1e1, 10.0 and 1000e-2 are all 10 (a client
// that encodes its numbers as doubles, as JavaScript's do, may send any),
// where encoding/json refuses all but the first into an int64. 1.5 is
// refused as no whole number, 1e400 as too large; the value is read from
// the digits, exactly, never through a float64.
func (p *parser) int() (int64, error) {
	neg := p.peek() == '-'
	if neg {
		p.i++
	}
	ip := p.i
	switch c := p.peek(); {
	case c == '0':
		p.i++
	case c >= '1' && c <= '9':
		p.digits()
	case c == '"' || c == 't' || c == 'f' || c == 'n' || c == '{' || c == '[':
		return 0, errCostInt
	default:
		return 0, errSyntax
	}
	intPart := p.b[ip:p.i]
	switch p.peek() {
	case '0', '1', '2', '3', '4', '5', '6', '7', '8', '9': // a leading zero
		return 0, errSyntax
	case '.', 'e', 'E':
	default:
		n, err := strconv.ParseInt(string(p.b[ip-b2i(neg):p.i]), 10, 64)
		switch {
		case err != nil && neg:
			return 0, errCostNeg
		case err != nil:
			return 0, errCostBig
		}
		return n, nil
	}
	var frac []byte
	if p.peek() == '.' {
		p.i++
		fp := p.i
		if p.digits() == 0 {
			return 0, errSyntax
		}
		frac = p.b[fp:p.i]
	}
	exp := 0
	if c := p.peek(); c == 'e' || c == 'E' {
		p.i++
		eneg := false
		if c := p.peek(); c == '+' || c == '-' {
			eneg = c == '-'
			p.i++
		}
		ep := p.i
		if p.digits() == 0 {
			return 0, errSyntax
		}
		for _, c := range p.b[ep:p.i] {
			if exp < 1e8 { // beyond, as far out of int64 as the body is long
				exp = exp*10 + int(c-'0')
			}
		}
		if eneg {
			exp = -exp
		}
	}
	return whole(neg, intPart, frac, exp)
}

// digits skips the decimal digits at p.i and returns how many.
func (p *parser) digits() int {
	start := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	return p.i - start
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// whole returns the number whose digits are intPart then frac, times
// 10^exp (negative if neg), if it is a whole number within int64.
func whole(neg bool, intPart, frac []byte, exp int) (int64, error) {
	n := len(intPart) + len(frac)
	digit := func(k int) byte {
		if k < len(intPart) {
			return intPart[k]
		}
		return frac[k-len(intPart)]
	}
	lo, hi := 0, n-1 // the first and last digits other than 0
	for lo < n && digit(lo) == '0' {
		lo++
	}
	if lo == n {
		return 0, nil // 0.0e999, -0.0
	}
	for digit(hi) == '0' {
		hi--
	}
	// The value is digits lo…hi times 10^e.
	e := exp - len(frac) + (n - 1 - hi)
	switch {
	case e < 0:
		return 0, errCostInt
	case hi-lo+1+e > 19 && neg: // more digits than int64's 19
		return 0, errCostNeg
	case hi-lo+1+e > 19:
		return 0, errCostBig
	}
	var v uint64 // at most 19 digits: below 10^19 < 2^64
	for k := lo; k <= hi; k++ {
		v = v*10 + uint64(digit(k)-'0')
	}
	for range e {
		v *= 10
	}
	switch {
	case neg && v > 1<<63:
		return 0, errCostNeg
	case neg:
		return -int64(v-1) - 1, nil // -2^63 too
	case v > math.MaxInt64:
		return 0, errCostBig
	}
	return int64(v), nil
}
