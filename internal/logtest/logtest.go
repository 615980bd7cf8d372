// Package logtest holds what the tests of throttled log lines share: a
// line a client can provoke at will is logged at most once a second, with
// the count of those left out (internal/logthrottle).
package logtest

import (
	"strconv"
	"strings"
	"testing"
)

// Matching returns the lines of all that contain substr.
func Matching(all []string, substr string) []string {
	var out []string
	for _, l := range all {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

// OncePerSecond checks the throttling of the lines containing substr among
// logged(): n events (provoke) within one second of the test's clock give
// one line; one more after advance (the clock a second on) gives a second,
// saying suppressed=n−1. what names the events in failure messages.
func OncePerSecond(t testing.TB, what, substr string, n int, logged func() []string, provoke, advance func()) {
	t.Helper()
	for range n {
		provoke()
	}
	if lines := Matching(logged(), substr); len(lines) != 1 {
		t.Fatalf("%d %s in one second logged %d lines, want 1: %q", n, what, len(lines), lines)
	}
	advance()
	provoke()
	want := "suppressed=" + strconv.Itoa(n-1)
	if lines := Matching(logged(), substr); len(lines) != 2 || !strings.Contains(lines[1], want) {
		t.Fatalf("one more of the %s a second later: %d lines, want 2, the second with %s: %q", what, len(lines), want, lines)
	}
}
