// Package demo is the program behind `sluice demo`: an overload storm sent
// straight at a provider, then the same storm through the gateway, side by
// side. Everything runs in one process on loopback: the mock provider, the
// gateway and the load generator are the real packages. It is internal
// because it is a program, not a library: nothing outside cmd/sluice calls
// it.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/loopback"
	"github.com/sluicehq/sluice/loadgen"
	"github.com/sluicehq/sluice/mockllm"
	"github.com/sluicehq/sluice/spend"
)

// Config shapes the demo. The zero value is the default demo: it finishes in
// well under a minute.
type Config struct {
	// Slots is the provider's capacity in concurrent calls. Zero means 8.
	Slots int
	// Median and Sigma shape the provider's lognormal service time for a
	// model of latency factor 1; the demo calls Model, whose factor in the
	// mock's table scales it. Zero means 300ms and 0.3.
	Median time.Duration
	Sigma  float64
	// Load is the storm's arrival rate as a multiple of capacity. Zero
	// means 5.
	Load float64
	// Duration is how long each storm's arrivals last. Zero means 12s.
	Duration time.Duration
	// Seed makes the storm's arrivals reproducible. Zero is a seed too.
	Seed uint64
}

func (c Config) withDefaults() Config {
	if c.Slots == 0 {
		c.Slots = 8
	}
	if c.Median == 0 {
		c.Median = 300 * time.Millisecond
	}
	if c.Sigma == 0 {
		c.Sigma = 0.3
	}
	if c.Load == 0 {
		c.Load = 5
	}
	if c.Duration == 0 {
		c.Duration = 12 * time.Second
	}
	return c
}

// Result is what the demo measured.
type Result struct {
	// Capacity is the provider's throughput in calls per second.
	Capacity float64
	Rate     float64
	Direct   Storm
	Sluice   Storm
	// Estimate is what the gateway's estimate endpoint answered mid-storm.
	Estimate *contract.Estimate
	// Metrics are a few lines of /metrics sampled mid-storm.
	Metrics []string
}

// Storm is one storm: what the callers saw and what the provider did.
type Storm struct {
	Load     *loadgen.Report
	Upstream mockllm.Stats
	// Books is the gateway's own spend accounting (through sluice only).
	Books *spend.ScopeSnapshot
}

// GoodputShare is goodput — answers delivered inside their deadline, per
// second of the storm — as a share of the provider's capacity.
func (r Storm) GoodputShare(capacity float64) float64 {
	if capacity == 0 {
		return 0
	}
	return r.Load.Goodput / capacity
}

// WastedShare is the share of started (billed) provider calls whose answer
// nobody received.
func (r Storm) WastedShare() float64 {
	if r.Upstream.Started == 0 {
		return 0
	}
	return float64(r.Upstream.Wasted+r.Upstream.Aborted) / float64(r.Upstream.Started)
}

// Model is the model the storm asks for.
const Model = "gpt-4o"

// classes is the storm's mix: the deadlines of a chat product.
func classes() []loadgen.Class {
	return []loadgen.Class{
		{Name: "interactive", Weight: 0.7, Deadline: 3 * time.Second},
		{Name: "batch", Weight: 0.2, Deadline: 6 * time.Second},
		{Name: "speculative", Weight: 0.1, Deadline: 2 * time.Second},
	}
}

// Run performs the demo and writes its report to w as it goes.
func Run(ctx context.Context, cfg Config, w io.Writer) (*Result, error) {
	cfg = cfg.withDefaults()
	if cfg.Slots < 1 || cfg.Median < 0 || cfg.Sigma < 0 || cfg.Load <= 0 || cfg.Duration <= 0 {
		return nil, errors.New("demo: Slots, Median, Sigma, Load and Duration must be positive")
	}
	factor := mockllm.BuiltinModels()[Model].LatencyFactor
	mean := factor * float64(cfg.Median) * math.Exp(cfg.Sigma*cfg.Sigma/2)
	res := &Result{Capacity: float64(cfg.Slots) / (mean / float64(time.Second))}
	res.Rate = cfg.Load * res.Capacity
	fmt.Fprintf(w, "sluice demo: a provider with %d slots and %v median calls to %s (capacity %.1f calls/s)\n",
		cfg.Slots, time.Duration(factor*float64(cfg.Median)), Model, res.Capacity)
	fmt.Fprintf(w, "is hit by %.0f requests/s (%.0f× capacity) for %v, from clients that retry at once on failure.\n",
		res.Rate, cfg.Load, cfg.Duration)
	fmt.Fprintf(w, "Deadlines: interactive 3s (70%%), batch 6s (20%%), speculative 2s (10%%).\n\n")

	mockCfg := mockllm.Config{Slots: cfg.Slots, Median: cfg.Median, Sigma: cfg.Sigma, Seed: cfg.Seed + 1}
	load := loadgen.Config{
		Rate:     res.Rate,
		Duration: cfg.Duration,
		Classes:  classes(),
		Policy:   loadgen.Naive{},
		Model:    Model,
		Seed:     cfg.Seed,
	}

	fmt.Fprintf(w, "1/2  the storm straight at the provider (an unbounded queue, as a real one behaves)...\n")
	direct, err := runDirect(ctx, mockCfg, load)
	if err != nil {
		return nil, err
	}
	res.Direct = direct
	fmt.Fprintf(w, "2/2  the same storm through sluice (concurrency %d, bounded queue, wait-based admission)...\n\n", cfg.Slots)
	through, err := runThrough(ctx, cfg, mockCfg, load, res)
	if err != nil {
		return nil, err
	}
	res.Sluice = through
	return res, res.write(w)
}

func runDirect(ctx context.Context, mockCfg mockllm.Config, load loadgen.Config) (Storm, error) {
	mock, err := mockllm.New(mockCfg)
	if err != nil {
		return Storm{}, err
	}
	url, stop, err := loopback.Serve(mock, 0)
	if err != nil {
		return Storm{}, err
	}
	defer stop()
	defer mock.Close()
	load.Target = url
	rep, err := loadgen.Run(ctx, load)
	if err != nil {
		return Storm{}, err
	}
	return Storm{Load: rep, Upstream: settled(mock)}, nil
}

// settled waits until the provider has finished what it started (it keeps
// generating answers for callers that left), then returns its books.
func settled(mock *mockllm.Server) mockllm.Stats {
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := mock.Stats()
		if st.InService == 0 || time.Now().After(deadline) {
			return st
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func runThrough(ctx context.Context, cfg Config, mockCfg mockllm.Config, load loadgen.Config, res *Result) (Storm, error) {
	factor := mockllm.BuiltinModels()[Model].LatencyFactor
	mock, err := mockllm.New(mockCfg)
	if err != nil {
		return Storm{}, err
	}
	upURL, stop, err := loopback.Serve(mock, 0)
	if err != nil {
		return Storm{}, err
	}
	defer stop()
	defer mock.Close()
	g, err := gateway.New(config.Config{
		Listen:   "127.0.0.1:0",
		Admin:    "127.0.0.1:0",
		Upstream: config.UpstreamConfig{URL: upURL},
		Admission: config.AdmissionConfig{
			Concurrency:        cfg.Slots,
			MaxQueue:           new(8 * cfg.Slots),
			InitialServiceTime: config.Duration(factor * float64(cfg.Median)),
		},
		ShutdownGrace: config.Duration(5 * time.Second),
		Spend:         mockPrices(),
	}, gateway.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return Storm{}, err
	}
	srv, err := gateway.Listen(g)
	if err != nil {
		return Storm{}, err
	}
	gwCtx, stopGateway := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(gwCtx) }()
	defer func() {
		stopGateway()
		<-served
	}()
	gwURL := "http://" + srv.API.Addr().String()
	adminURL := "http://" + srv.Admin.Addr().String()

	// Halfway through the storm, look where a user would look.
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		select {
		case <-time.After(cfg.Duration / 2):
		case <-ctx.Done():
			return
		}
		res.Estimate = fetchEstimate(gwURL)
		res.Metrics = fetchMetrics(adminURL)
	}()
	load.Target = gwURL
	rep, err := loadgen.Run(ctx, load)
	<-sampled
	if err != nil {
		return Storm{}, err
	}
	st := Storm{Load: rep, Upstream: settled(mock)}
	if snap := g.State().Spend; snap != nil {
		st.Books = &snap.Global
	}
	return st, nil
}

// mockPrices gives the gateway the mock provider's price list, so that it
// keeps books — spent, wasted, saved — that can be set beside the
// provider's bill. No ceiling: the demo is about load.
func mockPrices() *spend.Config {
	cfg := &spend.Config{Prices: map[string]spend.Price{}}
	for name, m := range mockllm.BuiltinModels() {
		if name != mockllm.DefaultModelKey {
			cfg.Prices[name] = spend.Price{InputPerMTok: m.InputUSDPerMTok, OutputPerMTok: m.OutputUSDPerMTok}
		}
	}
	return cfg
}

func fetchEstimate(base string) *contract.Estimate {
	resp, err := http.Get(base + contract.EstimatePath + "?priority=interactive&timeout_ms=3000")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var e contract.Estimate
	if json.NewDecoder(resp.Body).Decode(&e) != nil {
		return nil
	}
	return &e
}

// fetchMetrics keeps the lines a reader should look at first.
func fetchMetrics(admin string) []string {
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil
	}
	var keep []string
	for _, l := range strings.Split(string(b), "\n") {
		for _, p := range []string{"sluice_in_flight ", "sluice_queue_depth{", "sluice_estimated_wait_seconds{rank=\"4\"}", "sluice_rejections_total{"} {
			if strings.HasPrefix(l, p) && !strings.HasSuffix(l, " 0") {
				keep = append(keep, l)
			}
		}
	}
	return keep
}
