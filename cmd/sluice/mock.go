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
	cfg, listen, file, err := parseMockFlags(args, stderr)
	if err != nil {
		return err
	}
	deps := []mockDeployment{{listen: listen, cfg: cfg}}
	if file != "" {
		if deps, err = loadMockDeployments(file, cfg); err != nil {
			return err
		}
	}
	return serveMocks(ctx, deps, stdout, stderr)
}

// mockDeployment is one mock provider on its own address. name is empty
// for the single provider the flags describe.
type mockDeployment struct {
	name   string
	listen string
	cfg    mockllm.Config
}

// label is how output lines name the deployment: "mock" or "mock NAME".
func (d mockDeployment) label() string {
	if d.name == "" {
		return "mock"
	}
	return "mock " + d.name
}

// running is a deployment being served.
type runningMock struct {
	mockDeployment
	mock   *mockllm.Server
	srv    *http.Server
	served chan error
}

// serveMocks serves every deployment until ctx is done or one of them
// fails, then stops them all.
func serveMocks(ctx context.Context, deps []mockDeployment, stdout, stderr io.Writer) error {
	var run []*runningMock
	defer func() {
		for _, r := range run {
			_ = r.srv.Close()
			r.mock.Close()
		}
	}()
	failed := make(chan error, len(deps))
	for _, d := range deps {
		mock, err := mockllm.New(d.cfg)
		if err != nil {
			return mockFlagError(err)
		}
		ln, err := net.Listen("tcp", d.listen)
		if err != nil {
			mock.Close()
			if d.name != "" {
				return fmt.Errorf("--deployments: %s: listen: %v", d.name, err)
			}
			return fmt.Errorf("--listen: %v", err)
		}
		r := &runningMock{mockDeployment: d, mock: mock,
			srv: &http.Server{Handler: mock, ReadHeaderTimeout: 10 * time.Second}, served: make(chan error, 1)}
		run = append(run, r)
		go func() {
			err := r.srv.Serve(ln)
			r.served <- err
			if !errors.Is(err, http.ErrServerClosed) {
				failed <- fmt.Errorf("%s: serving on %s: %v", r.label(), ln.Addr(), err)
			}
		}()
		// One line per deployment on stdout with the address, with the real
		// port when the listen address asked for port 0: scripts and tests
		// read it.
		fmt.Fprintf(stdout, "%s listening on http://%s\n", d.label(), ln.Addr())
		c := d.cfg
		fmt.Fprintf(stderr, "%s: slots=%s mode=%s median=%v per-prompt-token=%v per-output-token=%v sigma=%v step=×%v at %v faults: error=%v hang=%v reset=%v abort-on-disconnect=%v\n",
			d.label(), slotsText(c.Slots), c.Mode, c.Median, c.PerPromptToken, c.PerOutputToken, c.Sigma, c.StepFactor, c.StepAt,
			c.ErrorRate, c.HangRate, c.ResetRate, c.AbortOnDisconnect)
	}

	select {
	case err := <-failed:
		return err
	case <-ctx.Done():
	}
	// Stop accepting, then answer everything the mocks hold (queued,
	// hanging, in service) with 503 instead of waiting out service times
	// that may be minutes long; the connections then drain.
	shutCtx, cancel := context.WithTimeout(context.Background(), mockShutdownTimeout)
	defer cancel()
	var firstErr error
	for _, r := range run {
		shut := make(chan error, 1)
		go func() { shut <- r.srv.Shutdown(shutCtx) }()
		r.mock.Close()
		if err := <-shut; err != nil && firstErr == nil {
			firstErr = fmt.Errorf("%s: shutting down: %v", r.label(), err)
		}
		<-r.served // http.ErrServerClosed
		st, _ := json.Marshal(r.mock.Stats())
		fmt.Fprintf(stdout, "%s stats: %s\n", r.label(), st)
	}
	return firstErr
}

func slotsText(n int) string {
	if n == 0 {
		return "unlimited"
	}
	return fmt.Sprint(n)
}

// parseMockFlags turns the command line into a validated mockllm.Config,
// the listen address and the --deployments file, if any. Every error names
// the flag it is about.
func parseMockFlags(args []string, stderr io.Writer) (mockllm.Config, string, string, error) {
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
		fmt.Fprintln(stderr, "X-Mock-Fault: none|error|hang|reset|429|cut and X-Mock-Latency-Ms: N override the draw;")
		fmt.Fprintln(stderr, "X-Mock-Output-Tokens: N makes the answer N tokens long (at most its max_tokens).")
		fmt.Fprintln(stderr, "POST /mock/v1/outage {\"mode\":\"refuse|500|hang|off\"} starts or ends an outage.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	var (
		listen       = fs.String("listen", "127.0.0.1:8081", "address to listen on; port 0 picks a free port (printed on stdout)")
		slots        = fs.Int("slots", def.Slots, "requests in service at once; 0 means unlimited")
		mode         = fs.String("mode", string(def.Mode), "when all slots are busy: queue (unbounded FIFO) or 429 (refuse with Retry-After)")
		median       = fs.Duration("median", def.Median, "median service time, or its fixed part with --per-prompt-token or --per-output-token; all three 0 answers at once with no timer (overhead benchmarks)")
		perPrompt    = fs.Duration("per-prompt-token", 0, "time each prompt token adds to a call's median; 0 means none")
		perOutput    = fs.Duration("per-output-token", 0, "time each answer token adds to a call's median, so that long answers take longer as on a decode-bound provider; 0 means none")
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
		modelsFile   = fs.String("models", "", "YAML or JSON file of models replacing the built-in table: name: {latency_factor, input_usd_per_mtok, output_usd_per_mtok, rpm, tpm}; \"*\" is the default row")
		deployments  = fs.String("deployments", "", "YAML file of several mock providers served at once, each on its own address (see docs/commands.md); the other flags are their defaults")
	)
	if err := fs.Parse(args); err != nil {
		return mockllm.Config{}, "", "", err
	}
	if fs.NArg() > 0 {
		return mockllm.Config{}, "", "", fmt.Errorf("unexpected argument %q (all settings are flags)", fs.Arg(0))
	}
	// Zero means "default" in mockllm.Config for these; on the command line
	// the defaults are spelled out, so an explicit 0 is a mistake to report.
	if *stepFactor == 0 {
		return mockllm.Config{}, "", "", errors.New("--step-factor: must be > 0 (1 means no slowdown), got 0")
	}
	if *outputTokens == 0 {
		return mockllm.Config{}, "", "", errors.New("--output-tokens: must be at least 1, got 0")
	}
	if *deployments != "" {
		listenSet := false
		fs.Visit(func(f *flag.Flag) { listenSet = listenSet || f.Name == "listen" })
		if listenSet {
			return mockllm.Config{}, "", "", errors.New("--listen: not with --deployments, where each deployment names its own listen address")
		}
	}
	if _, _, err := net.SplitHostPort(*listen); err != nil {
		return mockllm.Config{}, "", "", fmt.Errorf("--listen: want host:port, got %q", *listen)
	}
	cfg := mockllm.Config{
		Slots:             *slots,
		Mode:              mockllm.Mode(*mode),
		Median:            *median,
		PerPromptToken:    *perPrompt,
		PerOutputToken:    *perOutput,
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
			return mockllm.Config{}, "", "", err
		}
		cfg.Models = models
	}
	if err := cfg.Validate(); err != nil {
		return mockllm.Config{}, "", "", mockFlagError(err)
	}
	return cfg, *listen, *deployments, nil
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
	{"PerPromptToken", "--per-prompt-token"},
	{"PerOutputToken", "--per-output-token"},
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
