package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/mockllm"
)

func init() {
	register("mock", "run a fake OpenAI-compatible LLM provider with finite capacity, latency, faults and billing", runMock)
}

// mockShutdownTimeout bounds how long connections may take to drain once the
// mock has answered everything it held.
const mockShutdownTimeout = 10 * time.Second

func runMock(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, listen, err := parseMockFlags(args, stderr)
	if err != nil {
		return err
	}
	mock, err := mockllm.New(cfg)
	if err != nil {
		return mockFlagError(err)
	}
	defer mock.Close()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("--listen: %v", err)
	}
	srv := &http.Server{Handler: mock, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	// The first line on stdout is the address, with the real port when
	// --listen asked for port 0: scripts and tests read it.
	fmt.Fprintf(stdout, "mock listening on http://%s\n", ln.Addr())
	fmt.Fprintf(stderr, "mock: slots=%s mode=%s median=%v sigma=%v step=×%v at %v faults: error=%v hang=%v reset=%v abort-on-disconnect=%v\n",
		slotsText(cfg.Slots), cfg.Mode, cfg.Median, cfg.Sigma, cfg.StepFactor, cfg.StepAt,
		cfg.ErrorRate, cfg.HangRate, cfg.ResetRate, cfg.AbortOnDisconnect)

	select {
	case err := <-served:
		return fmt.Errorf("serving on %s: %v", ln.Addr(), err)
	case <-ctx.Done():
	}
	// Stop accepting, then answer everything the mock holds (queued,
	// hanging, in service) with 503 instead of waiting out service times
	// that may be minutes long; the connections then drain.
	shutCtx, cancel := context.WithTimeout(context.Background(), mockShutdownTimeout)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(shutCtx) }()
	mock.Close()
	if err := <-shut; err != nil {
		_ = srv.Close()
		return fmt.Errorf("shutting down: %v", err)
	}
	<-served // http.ErrServerClosed
	st, _ := json.Marshal(mock.Stats())
	fmt.Fprintf(stdout, "mock stats: %s\n", st)
	return nil
}

func slotsText(n int) string {
	if n == 0 {
		return "unlimited"
	}
	return fmt.Sprint(n)
}

// parseMockFlags turns the command line into a validated mockllm.Config
// and the listen address. Every error names the flag it is about.
func parseMockFlags(args []string, stderr io.Writer) (mockllm.Config, string, error) {
	def := mockllm.DefaultConfig()
	fs := flag.NewFlagSet("mock", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sluice mock [flags]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Serves a fake OpenAI-compatible provider (and Anthropic's /v1/messages) that")
		fmt.Fprintln(stderr, "behaves like a real one under overload: finite slots, lognormal service times,")
		fmt.Fprintln(stderr, "a mid-run slowdown, faults, and billing that goes on after clients leave.")
		fmt.Fprintln(stderr, "GET /mock/v1/stats reports what was billed and what was wasted. Per request,")
		fmt.Fprintln(stderr, "X-Mock-Fault: none|error|hang|reset|429 and X-Mock-Latency-Ms: N override the draw.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	var (
		listen       = fs.String("listen", "127.0.0.1:8081", "address to listen on; port 0 picks a free port (printed on stdout)")
		slots        = fs.Int("slots", def.Slots, "requests in service at once; 0 means unlimited")
		mode         = fs.String("mode", string(def.Mode), "when all slots are busy: queue (unbounded FIFO) or 429 (refuse with Retry-After)")
		median       = fs.Duration("median", def.Median, "median service time; 0 answers at once with no timer (overhead benchmarks)")
		sigma        = fs.Float64("sigma", def.Sigma, "spread of the lognormal service time (log-space standard deviation); 0 is exact")
		stepAt       = fs.Duration("step-at", 0, "from this long after start, service times are multiplied by --step-factor")
		stepFactor   = fs.Float64("step-factor", 1, "service-time multiplier from --step-at on; 1 means no slowdown")
		errorRate    = fs.Float64("error-rate", 0, "fraction of requests answered 500")
		hangRate     = fs.Float64("hang-rate", 0, "fraction of requests never answered until the client leaves")
		resetRate    = fs.Float64("reset-rate", 0, "fraction of requests whose connection is reset")
		abort        = fs.Bool("abort-on-disconnect", false, "stop generating (and billing) when the client leaves; default keeps generating")
		outputTokens = fs.Int("output-tokens", mockllm.DefaultOutputTokens, "completion tokens of a request that names no max_tokens")
		retryAfter   = fs.Duration("retry-after", 0, "delay advertised on 429s; 0 means the current median service time")
		seed         = fs.Uint64("seed", 0, "seed of service times and faults; 0 picks one at random")
		modelsFile   = fs.String("models", "", "YAML or JSON file of models replacing the built-in table: name: {latency_factor, input_usd_per_mtok, output_usd_per_mtok}; \"*\" is the default row")
	)
	if err := fs.Parse(args); err != nil {
		return mockllm.Config{}, "", err
	}
	if fs.NArg() > 0 {
		return mockllm.Config{}, "", fmt.Errorf("unexpected argument %q (all settings are flags)", fs.Arg(0))
	}
	// Zero means "default" in mockllm.Config for these; on the command line
	// the defaults are spelled out, so an explicit 0 is a mistake to report.
	if *stepFactor == 0 {
		return mockllm.Config{}, "", errors.New("--step-factor: must be > 0 (1 means no slowdown), got 0")
	}
	if *outputTokens == 0 {
		return mockllm.Config{}, "", errors.New("--output-tokens: must be at least 1, got 0")
	}
	if _, _, err := net.SplitHostPort(*listen); err != nil {
		return mockllm.Config{}, "", fmt.Errorf("--listen: want host:port, got %q", *listen)
	}
	cfg := mockllm.Config{
		Slots:             *slots,
		Mode:              mockllm.Mode(*mode),
		Median:            *median,
		Sigma:             *sigma,
		StepAt:            *stepAt,
		StepFactor:        *stepFactor,
		OutputTokens:      *outputTokens,
		RetryAfter:        *retryAfter,
		ErrorRate:         *errorRate,
		HangRate:          *hangRate,
		ResetRate:         *resetRate,
		AbortOnDisconnect: *abort,
		Seed:              *seed,
	}
	if *modelsFile != "" {
		models, err := loadMockModels(*modelsFile)
		if err != nil {
			return mockllm.Config{}, "", err
		}
		cfg.Models = models
	}
	if err := cfg.Validate(); err != nil {
		return mockllm.Config{}, "", mockFlagError(err)
	}
	return cfg, *listen, nil
}

// loadMockModels reads a model table. Unknown keys are errors: a
// misspelled price would otherwise silently be zero.
func loadMockModels(path string) (map[string]mockllm.ModelSpec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--models: %v", err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	var models map[string]mockllm.ModelSpec
	if err := dec.Decode(&models); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("--models: %s is empty", path)
		}
		return nil, fmt.Errorf("--models: %s: %v", path, err)
	}
	if len(models) == 0 {
		return nil, fmt.Errorf("--models: %s holds no models", path)
	}
	return models, nil
}

// mockConfigFlags maps mockllm.Config fields to the flags that set them.
var mockConfigFlags = []struct{ field, flag string }{
	{"Slots", "--slots"},
	{"Mode", "--mode"},
	{"Median", "--median"},
	{"Sigma", "--sigma"},
	{"StepAt", "--step-at"},
	{"StepFactor", "--step-factor"},
	{"OutputTokens", "--output-tokens"},
	{"RetryAfter", "--retry-after"},
	{"ErrorRate", "--error-rate"},
	{"HangRate", "--hang-rate"},
	{"ResetRate", "--reset-rate"},
}

// mockFlagError rewrites a *mockllm.ConfigError to name the flag instead
// of the Go field (in the reason too, which may name other fields); other
// errors pass through.
func mockFlagError(err error) error {
	var ce *mockllm.ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	if strings.HasPrefix(ce.Field, "Models[") {
		return fmt.Errorf("--models: %s: %s", ce.Field, ce.Reason)
	}
	reason := ce.Reason
	for _, m := range mockConfigFlags {
		reason = strings.ReplaceAll(reason, m.field, m.flag)
	}
	for _, m := range mockConfigFlags {
		if m.field == ce.Field {
			return fmt.Errorf("%s: %s", m.flag, reason)
		}
	}
	return err
}
