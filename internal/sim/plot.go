package sim

import (
	"bytes"
	"cmp"
	"encoding/xml"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
)

// MaxLanes is how many keys Plot draws in a lane of their own; the others
// share one last lane.
const MaxLanes = 6

// Layout of the picture, in pixels.
const (
	plotWidth   = 1000
	chartLeft   = 170
	chartRight  = plotWidth - 30
	chartWidth  = chartRight - chartLeft
	headerH     = 104 // title, subtitle, legend
	laneOver    = 18  // the band above the limit where rejected requests sit
	laneChart   = 84  // from the limit line down to zero, with 3 lanes or more
	tallChart   = 140 // the same with 1 or 2 lanes
	laneGap     = 16
	axisH       = 56
	sampleEvery = 2 // pixels between samples of the "in use" curve
)

// Colours.
const (
	colText     = "#1f2328"
	colMuted    = "#656d76"
	colGrid     = "#e6e8eb"
	colChart    = "#f8f9fa"
	colOver     = "#fdecea"
	colAdmit    = "#1a7f37"
	colReject   = "#cf222e"
	colUse      = "#8c959f"
	colLimit    = "#1f2328"
	colDelay    = "#0969da"
	colBoundary = "#c4c9cf"
)

// Plot draws the run in sum as an SVG picture: one lane per key (the
// busiest MaxLanes−1 keys, then the others together), each request a dot
// (admitted) or a cross (rejected, above the limit line), the capacity in
// use over time as a grey line under the limit, window boundaries for the
// windowed algorithms, and for the leaky bucket each request's delay as a
// blue line from its arrival to its departure. sum must come from Run with
// Options.Record set.
func Plot(w io.Writer, sum *Summary) error {
	if sum.Requests > 0 && len(sum.Events) == 0 {
		return fmt.Errorf("sim: plot: the run kept no events (set Options.Record)")
	}
	p := newPlotter(sum)
	var b bytes.Buffer
	p.draw(&b)
	_, err := w.Write(b.Bytes())
	if err != nil {
		return fmt.Errorf("sim: plot: %w", err)
	}
	return nil
}

type lane struct {
	label    string // the key, or "N other keys"
	key      string // "" for the shared lane
	events   []*Event
	admitted int64
	rejected int64
}

type plotter struct {
	sum      *Summary
	lanes    []*lane
	capacity int64 // "in use" at the limit line
	lo, hi   int64 // the time axis, µs
	height   int
	chartH   int // height of a lane's chart: laneChart or tallChart
}

func newPlotter(sum *Summary) *plotter {
	p := &plotter{sum: sum, capacity: capacityOf(sum.Algorithm, sum.Limit)}
	// Lanes: the busiest keys, then one for the rest.
	byKey := make(map[string]*lane)
	var all []*lane
	for i := range sum.Events {
		e := &sum.Events[i]
		l := byKey[e.Key]
		if l == nil {
			l = &lane{label: e.Key, key: e.Key}
			byKey[e.Key] = l
			all = append(all, l)
		}
		l.events = append(l.events, e)
	}
	slices.SortStableFunc(all, func(a, b *lane) int {
		if c := cmp.Compare(len(b.events), len(a.events)); c != 0 {
			return c
		}
		return cmp.Compare(a.key, b.key)
	})
	if len(all) > MaxLanes {
		rest := &lane{label: fmt.Sprintf("%d other keys", len(all)-(MaxLanes-1))}
		for _, l := range all[MaxLanes-1:] {
			rest.events = append(rest.events, l.events...)
		}
		slices.SortStableFunc(rest.events, func(a, b *Event) int { return cmp.Compare(a.Line, b.Line) })
		all = append(all[:MaxLanes-1], rest)
	}
	for _, l := range all {
		for _, e := range l.events {
			if e.Decision.Allowed {
				l.admitted++
			} else {
				l.rejected++
			}
		}
	}
	p.lanes = all

	// The time axis: every arrival and departure, with a little room.
	first, last := sum.First, sum.Last
	for i := range sum.Events {
		last = max(last, sum.Events[i].Micros+int64(sum.Events[i].Decision.Delay/time.Microsecond))
	}
	span := last - first
	if span <= 0 {
		span = int64(sum.Limit.Period / time.Microsecond)
	}
	pad := max(span/40, 1)
	p.lo, p.hi = max(0, first-pad), last+pad
	n := max(len(p.lanes), 1)
	p.chartH = laneChart
	if n <= 2 {
		p.chartH = tallChart
	}
	p.height = headerH + n*p.laneH() + axisH
	return p
}

// capacityOf is what "remaining" counts down from: the most requests of
// cost 1 admitted at one instant.
func capacityOf(a sluice.Algorithm, l sluice.Limit) int64 {
	switch a {
	case sluice.TokenBucket, sluice.GCRA:
		return l.BurstOrRate()
	case sluice.LeakyBucket:
		return l.BurstOrRate() + 1
	}
	return l.Rate
}

func (p *plotter) x(us int64) float64 {
	return chartLeft + float64(us-p.lo)/float64(p.hi-p.lo)*chartWidth
}

func (p *plotter) t(x float64) int64 {
	return p.lo + int64((x-chartLeft)/chartWidth*float64(p.hi-p.lo))
}

// laneTop is the top of lane i's band over the limit.
func (p *plotter) laneTop(i int) float64 { return headerH + float64(i*p.laneH()) }

// laneH is the height of a lane, gap included.
func (p *plotter) laneH() int { return laneOver + p.chartH + laneGap }

// y is the height of "in use" u in lane i.
func (p *plotter) y(i int, u int64) float64 {
	u = min(max(u, 0), p.capacity)
	return p.laneTop(i) + laneOver + float64(p.chartH)*(1-float64(u)/float64(p.capacity))
}

func (p *plotter) draw(b *bytes.Buffer) {
	sum := p.sum
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif" font-size="12" fill="%s">`+"\n",
		plotWidth, p.height, plotWidth, p.height, colText)
	fmt.Fprintf(b, "<title>%s</title>\n", esc("sluice simulate: "+Describe(sum.Algorithm, sum.Limit)))
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="#ffffff"/>`+"\n")

	// Title and subtitle.
	fmt.Fprintf(b, `<text x="24" y="34" font-size="20" font-weight="600">%s</text>`+"\n", esc(p.title()))
	fmt.Fprintf(b, `<text x="24" y="56" fill="%s">%s</text>`+"\n", colMuted, esc(p.subtitle()))
	p.legend(b, 24, 86)

	if len(p.lanes) == 0 {
		fmt.Fprintf(b, `<text x="%d" y="%d" fill="%s" text-anchor="middle">no requests in the trace</text>`+"\n", (chartLeft+chartRight)/2, headerH+p.laneH()/2, colMuted)
	}
	ticks := p.ticks()
	bottom := p.laneTop(len(p.lanes)) - laneGap
	if len(p.lanes) == 0 {
		bottom = p.laneTop(1) - laneGap
	}
	// Time grid across every lane.
	b.WriteString(`<g stroke="` + colGrid + `" stroke-width="1">` + "\n")
	for _, t := range ticks {
		x := p.x(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`+"\n", x, float64(headerH)-4, x, bottom)
	}
	b.WriteString("</g>\n")

	for i, l := range p.lanes {
		p.drawLane(b, i, l)
	}

	// The time axis.
	fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", chartLeft, bottom, chartRight, bottom, colMuted)
	step := int64(0)
	if len(ticks) > 1 {
		step = ticks[1] - ticks[0]
	}
	for _, t := range ticks {
		x := p.x(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", x, bottom, x, bottom+5, colMuted)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="%s">%s</text>`+"\n", x, bottom+19, colMuted, esc(p.tickLabel(t, step)))
	}
	fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="middle" fill="%s">%s</text>`+"\n", (chartLeft+chartRight)/2, bottom+40, colMuted, esc(p.axisCaption()))
	b.WriteString("</svg>\n")
}

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

func dot(x, y float64, fill string) string {
	return fmt.Sprintf(`<circle cx="%.1f" cy="%.1f" r="4" fill="%s" stroke="#ffffff" stroke-width="1"/>`, x, y, fill)
}

// smallDot is the dot of a crowded lane.
func smallDot(x, y float64, fill string) string {
	return fmt.Sprintf(`<circle cx="%.1f" cy="%.1f" r="2" fill="%s" fill-opacity="0.7"/>`, x, y, fill)
}

func cross(x, y float64, stroke string) string {
	return fmt.Sprintf(`<path d="M%.1f %.1fl7 7m0 -7l-7 7" stroke="%s" stroke-width="2.2" stroke-linecap="round" fill="none"/>`, x-3.5, y-3.5, stroke)
}

// boundaryStep is the spacing of window boundaries worth drawing, in µs,
// or 0.
func (p *plotter) boundaryStep() int64 {
	var step int64
	switch p.sum.Algorithm {
	case sluice.FixedWindow:
		step = int64(p.sum.Limit.Period / time.Microsecond)
	case sluice.SlidingWindowCounter:
		step = int64(p.sum.Limit.Period/time.Microsecond) / int64(max(p.sum.Limit.Segments, 1))
	default:
		return 0
	}
	if step <= 0 || (p.hi-p.lo)/step > 80 {
		return 0
	}
	return step
}

func (p *plotter) drawLane(b *bytes.Buffer, i int, l *lane) {
	top := p.laneTop(i)
	limitY := top + laneOver
	zeroY := limitY + float64(p.chartH)
	fmt.Fprintf(b, "<g>\n")
	// Background: the chart and the band over the limit.
	fmt.Fprintf(b, `<rect x="%d" y="%.1f" width="%d" height="%d" fill="%s"/>`+"\n", chartLeft, top, chartWidth, laneOver, colOver)
	fmt.Fprintf(b, `<rect x="%d" y="%.1f" width="%d" height="%d" fill="%s"/>`+"\n", chartLeft, limitY, chartWidth, p.chartH, colChart)
	// Key and counts.
	label := l.label
	if l.key != "" {
		label = clipRunes(l.key, 20)
	}
	fmt.Fprintf(b, `<text x="24" y="%.1f" font-size="13" font-weight="600">%s</text>`+"\n", limitY+22, esc(label))
	fmt.Fprintf(b, `<text x="24" y="%.1f" fill="%s"><tspan fill="%s">%d admitted</tspan></text>`+"\n", limitY+40, colMuted, colAdmit, l.admitted)
	fmt.Fprintf(b, `<text x="24" y="%.1f" fill="%s"><tspan fill="%s">%d rejected</tspan></text>`+"\n", limitY+56, colMuted, colReject, l.rejected)
	// The y axis: 0 and the limit.
	fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" fill="%s" font-size="11">%d</text>`+"\n", chartLeft-6, limitY+4, colMuted, p.capacity)
	fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" fill="%s" font-size="11">0</text>`+"\n", chartLeft-6, zeroY, colMuted)
	fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" fill="%s" font-size="10">over</text>`+"\n", chartLeft-6, top+laneOver/2+3, colReject)

	// Window boundaries.
	if step := p.boundaryStep(); step > 0 {
		b.WriteString(`<g stroke="` + colBoundary + `" stroke-dasharray="2 2">` + "\n")
		for t := (p.lo/step + 1) * step; t < p.hi; t += step {
			x := p.x(t)
			fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`+"\n", x, top, x, zeroY)
		}
		b.WriteString("</g>\n")
	}

	// The capacity in use, replayed from the algorithm itself.
	if l.key != "" {
		p.usage(b, i, l)
	}
	fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-width="1.5" stroke-dasharray="6 4"/>`+"\n", chartLeft, limitY, chartRight, limitY, colLimit)

	// Delays, then the requests on top. Marks that would land on the same
	// pixel are drawn once, which keeps the picture small for long traces.
	type mark struct{ kind, x, y, x2 int }
	seen := make(map[mark]bool)
	if p.sum.Algorithm == sluice.LeakyBucket {
		b.WriteString(`<g stroke="` + colDelay + `" stroke-width="1.5" fill="none">` + "\n")
		for _, e := range l.events {
			if !e.Decision.Allowed || e.Decision.Delay <= 0 {
				continue
			}
			x1, x2 := p.x(e.Micros), p.x(e.Micros+int64(e.Decision.Delay/time.Microsecond))
			y := p.y(i, p.capacity-e.Decision.Remaining)
			m := mark{0, int(x1), int(y), int(x2)}
			if seen[m] {
				continue
			}
			seen[m] = true
			fmt.Fprintf(b, `<path d="M%.1f %.1fH%.1fm0 -4v8"/>`+"\n", x1, y, x2)
		}
		b.WriteString("</g>\n")
	}
	mark1 := dot
	if len(l.events) > chartWidth/4 {
		mark1 = smallDot
	}
	for _, e := range l.events {
		x := p.x(e.Micros)
		if e.Decision.Allowed {
			y := p.y(i, p.capacity-e.Decision.Remaining)
			m := mark{1, int(x / 2), int(y / 2), 0}
			if !seen[m] {
				seen[m] = true
				b.WriteString(mark1(x, y, colAdmit) + "\n")
			}
		} else {
			y := top + laneOver/2
			m := mark{2, int(x / 2), int(y / 2), 0}
			if !seen[m] {
				seen[m] = true
				b.WriteString(cross(x, y, colReject) + "\n")
			}
		}
	}
	b.WriteString("</g>\n")
}

// usage draws the capacity in use of lane l's key over time by running the
// algorithm on its own state: the lane's requests, and between them
// requests of cost 0, which ask without counting.
func (p *plotter) usage(b *bytes.Buffer, i int, l *lane) {
	var st sluice.State
	var pts []float64
	add := func(x float64, u int64) { pts = append(pts, x, p.y(i, u)) }
	probe := func(t int64) int64 {
		var d sluice.Decision
		if _, err := p.sum.Algorithm.TakeMicro(&d, &st, &p.sum.Limit, t, 0); err != nil {
			return 0
		}
		return p.capacity - d.Remaining
	}
	px := float64(chartLeft)
	next := func() int64 { return p.t(px) }
	for _, e := range l.events {
		for ; px < chartRight && next() < e.Micros; px += sampleEvery {
			add(px, probe(next()))
		}
		x := p.x(e.Micros)
		add(x, probe(e.Micros))
		var d sluice.Decision
		if _, err := p.sum.Algorithm.TakeMicro(&d, &st, &p.sum.Limit, e.Micros, e.Cost); err != nil {
			return
		}
		add(x, p.capacity-d.Remaining)
	}
	for ; px <= chartRight; px += sampleEvery {
		add(px, probe(next()))
	}
	// Within each pixel column keep only the first, lowest, highest and
	// last points, then only the corners: the line looks the same, and a
	// long trace does not make a huge picture.
	var path strings.Builder
	var kept []float64
	n := len(pts) / 2
	for k := 0; k < n; {
		col := int(pts[2*k])
		j, lo, hi := k, k, k
		for ; j < n && int(pts[2*j]) == col; j++ {
			if pts[2*j+1] < pts[2*lo+1] {
				lo = j
			}
			if pts[2*j+1] > pts[2*hi+1] {
				hi = j
			}
		}
		idx := []int{k, lo, hi, j - 1}
		slices.Sort(idx)
		for m, q := range idx {
			if m == 0 || q != idx[m-1] {
				kept = append(kept, pts[2*q], pts[2*q+1])
			}
		}
		k = j
	}
	n = len(kept) / 2
	for k := 0; k < n; k++ {
		x, y := kept[2*k], kept[2*k+1]
		if k > 0 && k < n-1 && y == kept[2*k-1] && y == kept[2*k+3] {
			continue
		}
		if path.Len() == 0 {
			fmt.Fprintf(&path, "M%.1f %.1f", x, y)
		} else {
			fmt.Fprintf(&path, "L%.1f %.1f", x, y)
		}
	}
	fmt.Fprintf(b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.5" stroke-linejoin="round"/>`+"\n", path.String(), colUse)
}

// niceSteps are tick spacings in µs.
var niceSteps = []int64{
	1, 2, 5, 10, 20, 50, 100, 200, 500,
	1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5,
	1e6, 2e6, 5e6, 10e6, 15e6, 30e6,
	60e6, 120e6, 300e6, 600e6, 900e6, 1800e6,
	3600e6, 7200e6, 3 * 3600e6, 6 * 3600e6, 12 * 3600e6,
	86400e6, 2 * 86400e6, 7 * 86400e6, 14 * 86400e6, 28 * 86400e6,
}

func (p *plotter) ticks() []int64 {
	span := p.hi - p.lo
	step := niceSteps[len(niceSteps)-1]
	for _, s := range niceSteps {
		if span/s <= 8 {
			step = s
			break
		}
	}
	for span/step > 8 {
		step *= 2
	}
	var ts []int64
	for t := (p.lo + step - 1) / step * step; t <= p.hi; t += step {
		ts = append(ts, t)
	}
	return ts
}

// clock reports whether the trace is in real time (after 1973), labelled
// as UTC clock times; earlier traces are labelled in seconds.
func (p *plotter) clock() bool { return p.lo >= 1e14 }

func (p *plotter) tickLabel(t, step int64) string {
	if !p.clock() {
		return trimZeros(FormatTime(t)) + "s"
	}
	tm := time.UnixMicro(t).UTC()
	switch {
	case step >= 86400e6:
		return tm.Format("Jan 2")
	case step%1e6 == 0:
		return tm.Format("15:04:05")
	case step%1e3 == 0:
		return tm.Format("15:04:05.000")
	}
	return tm.Format("15:04:05.000000")
}

func (p *plotter) axisCaption() string {
	if !p.clock() {
		return "time (seconds since the Unix epoch)"
	}
	a, z := time.UnixMicro(p.lo).UTC(), time.UnixMicro(p.hi).UTC()
	if a.Format("2006-01-02") == z.Format("2006-01-02") {
		return "time (UTC) on " + a.Format("2006-01-02")
	}
	return "time (UTC) from " + a.Format("2006-01-02") + " to " + z.Format("2006-01-02")
}

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
