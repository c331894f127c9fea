// Package calibrate is the calibration behind `sluice sim --all` (unless
// --calibrate=false), the section of docs/results.md that checks the
// simulator against reality: it runs one workload twice — in package sim's
// virtual time, and for real on loopback with the load generator (package
// loadgen) sending through the gateway (package gateway) to the mock
// provider (package mockllm) — and reports the figures side by side, so
// results.md can say how far apart they are.
//
// The workload is the retry storm, scaled down so that the real run takes
// seconds: a provider with a few slots and lognormal service times in the
// hundreds of milliseconds, naive callers with a two-second deadline.
//
// It lives apart from package sim because it imports the gateway, which the
// simulator must not: the simulator depends only on the cores it drives. It
// is internal because it is a program, not a library.
package calibrate

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/loopback"
	"github.com/sluicehq/sluice/loadgen"
	"github.com/sluicehq/sluice/mockllm"
	"github.com/sluicehq/sluice/sim"
	"github.com/sluicehq/sluice/sim/scenario"
)

// Config shapes the calibration. The zero value is the default, which takes
// about a minute and a half of real time.
type Config struct {
	// Slots is the provider's concurrency, and the gateway's. Zero means 8.
	Slots int
	// Median and Sigma shape the provider's lognormal service time. Zero
	// means 200ms and 0.5.
	Median time.Duration
	Sigma  float64
	// Deadline is the callers' deadline; naive callers time each attempt
	// out at half of it. Zero means 2s.
	Deadline time.Duration
	// Loads are the load factors run. Empty means 1, 2 and 5.
	Loads []float64
	// Duration is how long arrivals last at each load. Zero means 20s.
	Duration time.Duration
	// Seed seeds both runs' arrivals. Zero is a seed too.
	Seed uint64
}

func (c Config) withDefaults() (Config, error) {
	if c.Slots == 0 {
		c.Slots = 8
	}
	if c.Median == 0 {
		c.Median = 200 * time.Millisecond
	}
	if c.Sigma == 0 {
		c.Sigma = 0.5
	}
	if c.Deadline == 0 {
		c.Deadline = 2 * time.Second
	}
	if len(c.Loads) == 0 {
		c.Loads = []float64{1, 2, 5}
	}
	if c.Duration == 0 {
		c.Duration = 20 * time.Second
	}
	switch {
	case c.Slots < 1:
		return c, fmt.Errorf("calibrate: Slots = %d, want ≥ 1", c.Slots)
	case c.Median < time.Millisecond:
		return c, fmt.Errorf("calibrate: Median = %v, want ≥ 1ms", c.Median)
	case c.Sigma < 0 || c.Sigma > 2:
		return c, fmt.Errorf("calibrate: Sigma = %v, want 0 to 2", c.Sigma)
	case c.Deadline < 10*time.Millisecond:
		return c, fmt.Errorf("calibrate: Deadline = %v, want ≥ 10ms", c.Deadline)
	case c.Duration < time.Second:
		return c, fmt.Errorf("calibrate: Duration = %v, want ≥ 1s", c.Duration)
	}
	for _, l := range c.Loads {
		if !(l > 0 && l <= 20) {
			return c, fmt.Errorf("calibrate: load %v, want (0, 20]", l)
		}
	}
	return c, nil
}

// Figures are the measures compared.
type Figures struct {
	Requests           int     `json:"requests"`
	GoodputPct         float64 `json:"goodput_pct"`
	SuccessPct         float64 `json:"success_pct"`
	WastePct           float64 `json:"waste_pct"`
	AttemptsPerRequest float64 `json:"attempts_per_request"`
	// P50Ms is the median latency of answered requests (loadgen counts late
	// answers in; the simulator's on-time answers are nearly all of them
	// under sluice).
	P50Ms float64 `json:"p50_ms"`
}

// Row is one load, simulated and real.
type Row struct {
	Load      float64 `json:"load"`
	Sim, Real Figures
	// SimLow and SimHigh are the lowest and highest of each figure over
	// SpreadSeeds simulated runs with other seeds: how much a run this
	// short varies by chance alone, to judge the difference against.
	SimLow, SimHigh Figures
}

// SpreadSeeds is how many seeds the simulated spread is taken over.
const SpreadSeeds = 10

// Report is a calibration run.
type Report struct {
	Config   Config
	Capacity float64 // calls per second
	Rows     []Row
	Took     time.Duration
}

// Scenario is the simulator's version of the calibration workload.
func (c Config) Scenario() *scenario.Scenario {
	dl := c.Deadline
	return &scenario.Scenario{
		Name: "calibration",
		Seed: c.Seed,
		Upstream: scenario.Upstream{
			Concurrency: c.Slots,
			Service:     scenario.Service{Lognormal: &scenario.Lognormal{Median: c.Median, Sigma: c.Sigma}},
		},
		Classes: []scenario.Class{{Name: "interactive", Deadline: dl}},
		Traffic: []scenario.Source{{Class: "interactive", Client: "naive", MaxAttempts: 3}},
		Sluice:  scenario.SluiceConfig{MaxQueue: 8 * c.Slots},
	}
}

// Run runs every load in the simulator and for real, one after the other.
func Run(ctx context.Context, cfg Config, progress io.Writer) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	sc := cfg.Scenario()
	mean := sc.Upstream.Service.Mean()
	rep := &Report{Config: cfg, Capacity: float64(cfg.Slots) / mean.Seconds()}
	for _, load := range cfg.Loads {
		rate := load * rep.Capacity
		requests := int(math.Round(rate * cfg.Duration.Seconds()))
		r, err := sim.Run(ctx, sc, "sluice", load, sim.Options{Requests: requests})
		if err != nil {
			return nil, err
		}
		row := Row{Load: load, Sim: figures(r)}
		row.SimLow, row.SimHigh = row.Sim, row.Sim
		for k := range uint64(SpreadSeeds) {
			other := *sc
			other.Seed = cfg.Seed + 1000 + k
			r, err := sim.Run(ctx, &other, "sluice", load, sim.Options{Requests: requests})
			if err != nil {
				return nil, err
			}
			row.SimLow, row.SimHigh = spread(row.SimLow, row.SimHigh, figures(r))
		}
		if progress != nil {
			fmt.Fprintf(progress, "calibrate: %g× for real (%.0f requests/s for %v)...\n", load, rate, cfg.Duration)
		}
		row.Real, err = real(ctx, cfg, rate, mean)
		if err != nil {
			return nil, fmt.Errorf("real run at %g×: %w", load, err)
		}
		rep.Rows = append(rep.Rows, row)
	}
	rep.Took = time.Since(start)
	return rep, nil
}

func figures(r *sim.Result) Figures {
	return Figures{
		Requests: r.Requests, GoodputPct: r.GoodputPct, SuccessPct: r.SuccessPct, WastePct: r.WastePct,
		AttemptsPerRequest: r.AttemptsPerRequest, P50Ms: r.P50Ms,
	}
}

func spread(lo, hi, f Figures) (Figures, Figures) {
	lo = Figures{min(lo.Requests, f.Requests), min(lo.GoodputPct, f.GoodputPct), min(lo.SuccessPct, f.SuccessPct),
		min(lo.WastePct, f.WastePct), min(lo.AttemptsPerRequest, f.AttemptsPerRequest), min(lo.P50Ms, f.P50Ms)}
	hi = Figures{max(hi.Requests, f.Requests), max(hi.GoodputPct, f.GoodputPct), max(hi.SuccessPct, f.SuccessPct),
		max(hi.WastePct, f.WastePct), max(hi.AttemptsPerRequest, f.AttemptsPerRequest), max(hi.P50Ms, f.P50Ms)}
	return lo, hi
}

// real runs the load generator through the gateway to a fresh mock.
func real(ctx context.Context, cfg Config, rate float64, mean time.Duration) (Figures, error) {
	mock, err := mockllm.New(mockllm.Config{
		Slots:  cfg.Slots,
		Mode:   mockllm.ModeQueue,
		Median: cfg.Median,
		Sigma:  cfg.Sigma,
		Seed:   cfg.Seed + 1,
		Models: map[string]mockllm.ModelSpec{"*": {LatencyFactor: 1}},
	})
	if err != nil {
		return Figures{}, err
	}
	defer mock.Close()
	mockURL, stopMock, err := loopback.Serve(mock, 5*time.Second)
	if err != nil {
		return Figures{}, err
	}
	defer stopMock()

	gw, err := gateway.New(config.Config{
		Upstream: config.UpstreamConfig{URL: mockURL},
		Admission: config.AdmissionConfig{
			Concurrency:        cfg.Slots,
			MaxQueue:           new(8 * cfg.Slots),
			InitialServiceTime: config.Duration(mean),
		},
	}, gateway.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return Figures{}, err
	}
	gwURL, stopGW, err := loopback.Serve(gw, 5*time.Second)
	if err != nil {
		return Figures{}, err
	}
	defer stopGW()

	lr, err := loadgen.Run(ctx, loadgen.Config{
		Target:      gwURL,
		Rate:        rate,
		Duration:    cfg.Duration,
		Classes:     []loadgen.Class{{Name: "interactive", Weight: 1, Deadline: cfg.Deadline}},
		Policy:      loadgen.Naive{},
		MaxAttempts: 3,
		Seed:        cfg.Seed,
		MaxInFlight: 10000,
	})
	if err != nil {
		return Figures{}, err
	}
	st := mock.Stats()
	capacity := float64(cfg.Slots) / mean.Seconds()
	f := Figures{
		Requests:           lr.Requests,
		GoodputPct:         100 * lr.Goodput / capacity,
		SuccessPct:         100 * lr.SuccessRatio,
		AttemptsPerRequest: lr.AttemptsPerRequest,
		P50Ms:              lr.Latency.P50Ms,
	}
	// Wasted: billed calls nobody received, plus answers delivered after
	// their request's deadline (the simulator counts both).
	if st.Started > 0 {
		f.WastePct = 100 * float64(st.Wasted+st.Aborted+int64(lr.Late)) / float64(st.Started)
	}
	return f, nil
}

// WriteMarkdown prints the comparison table.
func (r *Report) WriteMarkdown(w io.Writer) error {
	fmt.Fprintln(w, "| load | run | requests | goodput % cap | success % | waste % billed | attempts/req | p50 s |")
	fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---:|---:|")
	for _, row := range r.Rows {
		for _, x := range []struct {
			name string
			f    Figures
		}{{"simulated", row.Sim}, {"real", row.Real}} {
			fmt.Fprintf(w, "| %g× | %s | %d | %.1f | %.1f | %.2f | %.2f | %.2f |\n", row.Load, x.name, x.f.Requests,
				x.f.GoodputPct, x.f.SuccessPct, x.f.WastePct, x.f.AttemptsPerRequest, x.f.P50Ms/1000)
		}
		lo, hi := row.SimLow, row.SimHigh
		fmt.Fprintf(w, "| %g× | simulated, %d other seeds: range | %d–%d | %.1f–%.1f | %.1f–%.1f | %.2f–%.2f | %.2f–%.2f | %.2f–%.2f |\n",
			row.Load, SpreadSeeds, lo.Requests, hi.Requests, lo.GoodputPct, hi.GoodputPct, lo.SuccessPct, hi.SuccessPct,
			lo.WastePct, hi.WastePct, lo.AttemptsPerRequest, hi.AttemptsPerRequest, lo.P50Ms/1000, hi.P50Ms/1000)
		fmt.Fprintf(w, "| %g× | difference (real − simulated) | | %+.1f | %+.1f | %+.2f | %+.2f | %+.2f |\n", row.Load,
			row.Real.GoodputPct-row.Sim.GoodputPct, row.Real.SuccessPct-row.Sim.SuccessPct, row.Real.WastePct-row.Sim.WastePct,
			row.Real.AttemptsPerRequest-row.Sim.AttemptsPerRequest, (row.Real.P50Ms-row.Sim.P50Ms)/1000)
	}
	var outside []string
	for _, row := range r.Rows {
		lo, hi, re := row.SimLow, row.SimHigh, row.Real
		for _, f := range []struct {
			name      string
			v, lo, hi float64
		}{
			{"goodput", re.GoodputPct, lo.GoodputPct, hi.GoodputPct},
			{"success", re.SuccessPct, lo.SuccessPct, hi.SuccessPct},
			{"waste", re.WastePct, lo.WastePct, hi.WastePct},
			{"attempts/req", re.AttemptsPerRequest, lo.AttemptsPerRequest, hi.AttemptsPerRequest},
			{"p50", re.P50Ms, lo.P50Ms, hi.P50Ms},
		} {
			if f.v < f.lo || f.v > f.hi {
				outside = append(outside, fmt.Sprintf("%s at %g×", f.name, row.Load))
			}
		}
	}
	fmt.Fprintln(w)
	if len(outside) == 0 {
		fmt.Fprintf(w, "Every real figure lies within the range of the %d other simulated seeds.\n", SpreadSeeds)
	} else {
		fmt.Fprintf(w, "Real figures outside the range of the %d other simulated seeds: %s.\n", SpreadSeeds, strings.Join(outside, ", "))
	}
	return nil
}
