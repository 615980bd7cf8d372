package sim

import "time"

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
