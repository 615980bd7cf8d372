package sim

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

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
