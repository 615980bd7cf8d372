package sim

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
)

func (p *plotter) title() string {
	return "sluice simulate · " + Describe(p.sum.Algorithm, p.sum.Limit)
}

func (p *plotter) subtitle() string {
	s := p.sum
	keys := "keys"
	if len(s.Keys) == 1 {
		keys = "key"
	}
	return fmt.Sprintf("trace %s · %d requests from %d %s · %s", s.Trace, s.Requests, len(s.Keys), keys, p.limitWords())
}

// limitWords says what the limit line means.
func (p *plotter) limitWords() string {
	l := p.sum.Limit
	per := l.Period.String()
	if u := strings.TrimPrefix(l.String(), strconv.FormatInt(l.Rate, 10)+"/"); u != "" {
		per = map[string]string{"s": "second", "m": "minute", "h": "hour", "d": "day"}[u]
		if per == "" {
			per = u
		}
	}
	switch p.sum.Algorithm {
	case sluice.TokenBucket, sluice.GCRA:
		return fmt.Sprintf("refills %d per %s into a bucket of %d", l.Rate, per, l.BurstOrRate())
	case sluice.LeakyBucket:
		return fmt.Sprintf("leaves evenly at %d per %s, up to %d waiting", l.Rate, per, l.BurstOrRate())
	case sluice.FixedWindow:
		return fmt.Sprintf("%d per %s window, aligned to the epoch", l.Rate, per)
	case sluice.SlidingWindowCounter:
		if l.Segments > 1 {
			return fmt.Sprintf("%d in any %s, estimated over %d sub-windows", l.Rate, per, l.Segments)
		}
		return fmt.Sprintf("%d in any %s, estimated from two windows", l.Rate, per)
	}
	return fmt.Sprintf("%d in any %s", l.Rate, per)
}

func (p *plotter) legend(b *bytes.Buffer, x, y float64) {
	s := p.sum
	item := func(icon, text string) {
		fmt.Fprintf(b, `<g transform="translate(%.1f %.1f)">%s<text x="16" y="4">%s</text></g>`+"\n", x, y, icon, esc(text))
		x += 16 + textWidth(text) + 22
	}
	item(dot(0, 0, colAdmit), fmt.Sprintf("admitted (%d)", s.Admitted))
	item(cross(0, 0, colReject), fmt.Sprintf("rejected (%d)", s.Rejected))
	item(fmt.Sprintf(`<line x1="-6" y1="0" x2="8" y2="0" stroke="%s" stroke-width="2" stroke-dasharray="5 3"/>`, colLimit), p.limitLegend())
	item(fmt.Sprintf(`<line x1="-6" y1="0" x2="8" y2="0" stroke="%s" stroke-width="2"/>`, colUse), "in use")
	if s.Algorithm == sluice.LeakyBucket {
		item(fmt.Sprintf(`<line x1="-6" y1="0" x2="8" y2="0" stroke="%s" stroke-width="2"/><line x1="8" y1="-4" x2="8" y2="4" stroke="%s" stroke-width="2"/>`, colDelay, colDelay),
			fmt.Sprintf("delay until it leaves (max %ss)", trimZeros(FormatDuration(s.MaxDelay))))
	}
	if p.boundaryStep() > 0 {
		item(fmt.Sprintf(`<line x1="1" y1="-7" x2="1" y2="7" stroke="%s" stroke-dasharray="2 2"/>`, colBoundary), "window boundary")
	}
}

// limitLegend says what the dashed line is.
func (p *plotter) limitLegend() string {
	l := p.sum.Limit
	switch p.sum.Algorithm {
	case sluice.TokenBucket, sluice.GCRA:
		return fmt.Sprintf("limit: a bucket of %d", l.BurstOrRate())
	case sluice.LeakyBucket:
		return fmt.Sprintf("limit: 1 leaving + %d waiting", l.BurstOrRate())
	case sluice.FixedWindow:
		return fmt.Sprintf("limit: %d per window", l.Rate)
	}
	return fmt.Sprintf("limit: %d per sliding window", l.Rate)
}

// textWidth estimates the width of s in pixels at 12px.
func textWidth(s string) float64 { return 6.6 * float64(utf8.RuneCountInString(s)) }

// trimZeros drops trailing zero decimals: "12.500000" is "12.5".
func trimZeros(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

func clipRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}
