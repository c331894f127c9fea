package simreport

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/sluicehq/sluice/sim"
)

// palette gives each policy of the ladder its own colour (Tableau 10), so a
// policy keeps its colour across every plot.
var palette = []color.RGBA{
	{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {214, 39, 40, 255},
	{148, 103, 189, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255},
	{188, 189, 34, 255}, {23, 190, 207, 255}, {0, 0, 0, 255},
}

func policyStyle(name string) (color.Color, []vg.Length, vg.Length) {
	policies := sim.Policies()
	i := 0
	for k, p := range policies {
		if p.Name == name {
			i = k
		}
	}
	p := policies[i]
	width := vg.Points(1.5)
	var dashes []vg.Length
	if !p.Sluice {
		dashes = []vg.Length{vg.Points(5), vg.Points(3)}
	}
	if p.Name == "sluice" || p.SpendLimiter() {
		width = vg.Points(3)
	}
	return palette[i%len(palette)], dashes, width
}

// writeGoodputPlot draws goodput (% of capacity) against load, one line per
// policy, as a PNG.
func (sw *sweep) writeGoodputPlot(w io.Writer) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: goodput versus load", sw.Scenario.Name)
	p.X.Label.Text = "offered load (× capacity, first attempts)"
	p.Y.Label.Text = "goodput (% of capacity)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = loadTicks(sw.Loads)
	if lo, hi := slices.Min(sw.Loads), slices.Max(sw.Loads); lo == hi {
		// gonum widens an empty range by one on each side, which takes
		// a single load of 1 or less to zero or below, where a log scale
		// panics; a factor of two on each side keeps it positive.
		p.X.Min, p.X.Max = lo/2, hi*2
	}
	// Goodput counts calls: calls degraded to a faster model take less of
	// the upstream, so with the spend limiter it can pass 100%.
	var top float64
	for _, row := range sw.Results {
		for _, r := range row {
			top = max(top, r.GoodputPct)
		}
	}
	p.Y.Min, p.Y.Max = 0, 105
	p.Add(plotter.NewGrid())
	// Top right, below the 100% line: the lines crowd the top and, for the
	// collapsing policies, the bottom.
	p.Legend.Top = true
	p.Legend.YOffs = -vg.Points(70)
	if top > 103 {
		// Well above 100% (calls degraded to a faster model), the top
		// right is taken, and the lines are still together at the lowest
		// load: top left, with room above them.
		p.Y.Max = math.Ceil(top/10)*10 + 45
		p.Legend.Left, p.Legend.YOffs, p.Legend.XOffs = true, 0, vg.Points(10)
	}
	for j, pol := range sw.Policies {
		xy := make(plotter.XYs, len(sw.Loads))
		for i, load := range sw.Loads {
			xy[i].X = load
			xy[i].Y = sw.Results[i][j].GoodputPct
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return err
		}
		l.Color, l.Dashes, l.Width = policyStyle(pol.Name)
		p.Add(l)
		p.Legend.Add(pol.Label, l)
	}
	wt, err := p.WriterTo(8*vg.Inch, 5*vg.Inch, "png")
	if err != nil {
		return err
	}
	_, err = wt.WriteTo(w)
	return err
}

type loadTicks []float64

func (t loadTicks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for _, l := range t {
		if l >= lo && l <= hi {
			out = append(out, plot.Tick{Value: l, Label: fmt.Sprintf("%g×", l)})
		}
	}
	return out
}

// plainTicks are gonum's default ticks labelled without trailing zeros.
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'g', 6, 64)
		}
	}
	return ticks
}

// writeTimeseriesPlot draws, for traced results of one scenario and load,
// four panels over time: on-time answers per second, queue depth, the
// estimated wait sluice would tell a newcomer, and the median latency of
// on-time answers. Only [from, to) is drawn.
func writeTimeseriesPlot(w io.Writer, title string, results []*sim.Result, from, to time.Duration) error {
	panels := []struct {
		title, y string
		value    func(s *sim.Series, i int) (float64, bool)
	}{
		{"on-time answers per second", "answers/s", func(s *sim.Series, i int) (float64, bool) { return s.Goodput[i], true }},
		{"queue depth", "queued", func(s *sim.Series, i int) (float64, bool) { return float64(s.Depth[i]), true }},
		{"estimated wait told to a newcomer (sluice policies only)", "seconds", func(s *sim.Series, i int) (float64, bool) {
			if s.EstimatedWait == nil {
				return 0, false
			}
			return s.EstimatedWait[i].Seconds(), true
		}},
		{"median latency of on-time answers", "seconds", func(s *sim.Series, i int) (float64, bool) {
			if s.LatencyP50[i] == 0 {
				return math.NaN(), true
			}
			return s.LatencyP50[i].Seconds(), true
		}},
	}
	plots := make([][]*plot.Plot, len(panels))
	for k, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		if k == 0 {
			p.Title.Text = title + " — " + pn.title
		}
		p.Y.Label.Text = pn.y
		p.X.Label.Text = "simulated time (s)"
		p.X.Min, p.X.Max = from.Seconds(), to.Seconds()
		p.X.Tick.Marker = plainTicks{}
		p.Y.Tick.Marker = plainTicks{}
		p.Y.Min = 0
		p.Add(plotter.NewGrid())
		p.Legend.Top = true
		for _, r := range results {
			s := r.Series
			if s == nil {
				return fmt.Errorf("%s: result has no time series (run with Options.Trace)", r.Policy)
			}
			var xy plotter.XYs
			for i := range s.Goodput {
				t := time.Duration(i) * s.Bucket
				if t < from || t >= to {
					continue
				}
				v, ok := pn.value(s, i)
				if !ok {
					break
				}
				if math.IsNaN(v) {
					continue
				}
				xy = append(xy, plotter.XY{X: t.Seconds(), Y: v})
			}
			if len(xy) == 0 {
				continue
			}
			l, err := plotter.NewLine(xy)
			if err != nil {
				return err
			}
			l.Color, l.Dashes, l.Width = policyStyle(r.Policy)
			p.Add(l)
			if k == 0 {
				p.Legend.Add(r.Label, l)
			}
		}
		plots[k] = []*plot.Plot{p}
	}
	img := vgimg.New(10*vg.Inch, 13*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadX: vg.Millimeter, PadY: 4 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 2 * vg.Millimeter}
	canvases := plot.Align(plots, tiles, dc)
	for k := range plots {
		plots[k][0].Draw(canvases[k][0])
	}
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}
