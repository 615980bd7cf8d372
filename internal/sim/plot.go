package sim

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"slices"
	"time"

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
