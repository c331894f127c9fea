package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/loadgen"
)

func init() {
	register("load", "send open-loop Poisson load at a gateway or provider and report goodput", runLoad)
}

// defaultMix is the --mix default, spelled as a user would.
const defaultMix = "interactive=0.7,batch=0.2,speculative=0.1"

// defaultDeadlines are the class deadlines --deadline starts from.
var defaultDeadlines = func() map[string]time.Duration {
	m := map[string]time.Duration{}
	for _, c := range loadgen.DefaultClasses() {
		m[c.Name] = c.Deadline
	}
	return m
}()

func runLoad(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, asJSON, err := parseLoadFlags(args, stderr)
	if err != nil {
		return err
	}
	rep, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return flagError(err)
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.WriteText(stdout)
}

// parseLoadFlags turns the command line into a validated loadgen.Config.
// Every error names the flag it is about.
func parseLoadFlags(args []string, stderr io.Writer) (loadgen.Config, bool, error) {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sluice load --target URL [flags]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Sends POST {target}/v1/chat/completions as an open-loop Poisson process and")
		fmt.Fprintln(stderr, "reports what callers experienced: goodput (answers inside their deadline")
		fmt.Fprintln(stderr, "per second), success per class, latency, attempts per request, rejections,")
		fmt.Fprintln(stderr, "attempts left unanswered by their caller's own timeout, and time to a refusal.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	var (
		target         = fs.String("target", "", "base URL of the gateway or provider, e.g. http://127.0.0.1:8080 (required)")
		rate           = fs.Float64("rate", 10, "mean arrival rate, logical requests per second")
		duration       = fs.Duration("duration", 10*time.Second, "how long arrivals are generated; 0 needs --max-requests")
		mix            = fs.String("mix", defaultMix, "class mix as name=weight,...; weights are relative")
		deadline       = fs.String("deadline", "", "class deadlines as name=duration,... (defaults: interactive=10s,batch=30s,speculative=5s)")
		policy         = fs.String("policy", "naive", "client behaviour: "+strings.Join(loadgen.PolicyNames(), " or "))
		maxAttempts    = fs.Int("max-attempts", loadgen.DefaultMaxAttempts, "attempts per logical request, the first included")
		attemptTimeout = fs.Duration("attempt-timeout", 0, "naive's fixed per-attempt timeout; 0 means half the class deadline")
		model          = fs.String("model", loadgen.DefaultModel, "model field of the request body")
		maxTokens      = fs.Int("max-tokens", loadgen.DefaultMaxTokens, "max_tokens field of the request body")
		stream         = fs.Bool("stream", false, "request server-sent-event streams; answers count at their last byte")
		samePrompt     = fs.Bool("same-prompt", false, "send every request with the same bytes (no per-request \"seed\"), as load tools and popular prompts do")
		attemptHeaders = fs.String("attempt-headers", string(loadgen.AttemptHeadersSluice), "headers that declare each attempt's number and deadline: sluice, stainless (the OpenAI SDKs' X-Stainless-*), both, or none (no attempt number)")
		apiKey         = fs.String("api-key", "", "sent as Authorization: Bearer <key>; empty sends none")
		maxRequests    = fs.Int("max-requests", 0, "hard bound on logical requests; 0 means no bound but --duration")
		maxInFlight    = fs.Int("max-in-flight", loadgen.DefaultMaxInFlight, "cap on concurrent attempts; arrivals beyond it count as client_overflow")
		seed           = fs.Uint64("seed", 1, "seed of the arrival schedule and class draws")
		asJSON         = fs.Bool("json", false, "print the report as JSON")
	)
	headers := http.Header{}
	fs.Func("header", "extra request header as 'Name: value' (repeatable)", func(v string) error {
		name, value, ok := strings.Cut(v, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return fmt.Errorf("want 'Name: value', got %q", v)
		}
		headers.Add(name, strings.TrimSpace(value))
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return loadgen.Config{}, false, err
	}
	if fs.NArg() > 0 {
		return loadgen.Config{}, false, fmt.Errorf("unexpected argument %q (all settings are flags)", fs.Arg(0))
	}
	if *target == "" {
		return loadgen.Config{}, false, errors.New("--target is required (e.g. --target http://127.0.0.1:8080)")
	}
	if *duration == 0 && *maxRequests == 0 {
		return loadgen.Config{}, false, errors.New("--duration 0 needs --max-requests N, or the run would never stop")
	}
	classes, err := parseClasses(*mix, *deadline)
	if err != nil {
		return loadgen.Config{}, false, err
	}
	pol, err := loadgen.PolicyByName(*policy)
	if err != nil {
		return loadgen.Config{}, false, fmt.Errorf("--policy: %v", err)
	}
	// Zero means "default" in loadgen.Config; on the command line the
	// defaults are spelled out, so an explicit 0 is a mistake to report.
	for _, z := range []struct {
		flag string
		v    int
	}{{"--max-attempts", *maxAttempts}, {"--max-tokens", *maxTokens}, {"--max-in-flight", *maxInFlight}} {
		if z.v == 0 {
			return loadgen.Config{}, false, fmt.Errorf("%s: must be at least 1, got 0", z.flag)
		}
	}
	if len(headers) == 0 {
		headers = nil
	}
	// Empty means the default in loadgen.Config; on the command line it is
	// a value left out by mistake (--attempt-headers "").
	if *attemptHeaders == "" {
		return loadgen.Config{}, false, errors.New("--attempt-headers: must be one of sluice, stainless, both, none, got \"\"")
	}
	cfg := loadgen.Config{
		Target:         *target,
		Rate:           *rate,
		Duration:       *duration,
		MaxRequests:    *maxRequests,
		Classes:        classes,
		Policy:         pol,
		MaxAttempts:    *maxAttempts,
		AttemptTimeout: *attemptTimeout,
		Model:          *model,
		MaxTokens:      *maxTokens,
		Stream:         *stream,
		SamePrompt:     *samePrompt,
		AttemptHeaders: loadgen.AttemptHeaders(*attemptHeaders),
		APIKey:         *apiKey,
		Headers:        headers,
		MaxInFlight:    *maxInFlight,
		Seed:           *seed,
	}
	if err := cfg.Validate(); err != nil {
		return loadgen.Config{}, false, flagError(err)
	}
	return cfg, *asJSON, nil
}

// parseClasses builds the class list from --mix and --deadline. Classes keep
// the order of --mix, so reports list them as the user wrote them.
func parseClasses(mix, deadlines string) ([]loadgen.Class, error) {
	weights, order, err := parsePairs("--mix", mix, func(v string) (float64, error) {
		w, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(w) || math.IsInf(w, 0) {
			return 0, fmt.Errorf("%q is not a number", v)
		}
		if w < 0 {
			return 0, fmt.Errorf("must not be negative, got %v", w)
		}
		return w, nil
	})
	if err != nil {
		return nil, err
	}
	if len(order) == 0 {
		return nil, errors.New("--mix: no classes given")
	}
	total := 0.0
	for _, w := range weights {
		total += w
	}
	if total <= 0 {
		return nil, errors.New("--mix: at least one class needs a positive weight")
	}
	dls, dlOrder, err := parsePairs("--deadline", deadlines, func(v string) (time.Duration, error) {
		d, err := time.ParseDuration(v)
		if err != nil {
			return 0, fmt.Errorf("%q is not a duration (e.g. 10s, 1500ms)", v)
		}
		if d <= 0 {
			return 0, fmt.Errorf("must be positive, got %v", d)
		}
		return d, nil
	})
	if err != nil {
		return nil, err
	}
	for _, name := range dlOrder {
		if _, ok := weights[name]; !ok {
			return nil, fmt.Errorf("--deadline: class %q is not in --mix (classes: %s)", name, strings.Join(order, ", "))
		}
	}
	classes := make([]loadgen.Class, 0, len(order))
	for _, name := range order {
		d, ok := dls[name]
		if !ok {
			d, ok = defaultDeadlines[name]
		}
		if !ok {
			return nil, fmt.Errorf("--deadline: class %q has no default deadline; add %s=<duration>", name, name)
		}
		classes = append(classes, loadgen.Class{Name: name, Weight: weights[name], Deadline: d})
	}
	return classes, nil
}

var classNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// parsePairs parses "name=value,name=value". Empty input is no pairs.
func parsePairs[V any](flagName, s string, parse func(string) (V, error)) (map[string]V, []string, error) {
	out := map[string]V{}
	var order []string
	if strings.TrimSpace(s) == "" {
		return out, nil, nil
	}
	for _, item := range strings.Split(s, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		name, val = strings.TrimSpace(name), strings.TrimSpace(val)
		if !ok || name == "" || val == "" {
			return nil, nil, fmt.Errorf("%s: entry %q is not name=value", flagName, item)
		}
		if !classNameRE.MatchString(name) {
			return nil, nil, fmt.Errorf("%s: class name %q may hold only letters, digits, '-' and '_'", flagName, name)
		}
		if _, dup := out[name]; dup {
			return nil, nil, fmt.Errorf("%s: class %q given twice", flagName, name)
		}
		v, err := parse(val)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %s: %v", flagName, name, err)
		}
		out[name] = v
		order = append(order, name)
	}
	return out, order, nil
}

// configFlags maps loadgen.Config fields to the flags that set them.
var configFlags = map[string]string{
	"Target":         "--target",
	"Rate":           "--rate",
	"Duration":       "--duration",
	"MaxRequests":    "--max-requests",
	"Classes":        "--mix",
	"Policy":         "--policy",
	"MaxAttempts":    "--max-attempts",
	"AttemptTimeout": "--attempt-timeout",
	"Model":          "--model",
	"MaxTokens":      "--max-tokens",
	"APIKey":         "--api-key",
	"Headers":        "--header",
	"MaxInFlight":    "--max-in-flight",
	"AttemptHeaders": "--attempt-headers",
}

// flagError rewrites a *loadgen.ConfigError to name the flag instead of the
// Go field; other errors pass through.
func flagError(err error) error {
	var ce *loadgen.ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	field := ce.Field
	if strings.HasPrefix(field, "Classes[") {
		if strings.HasSuffix(field, ".Deadline") {
			return fmt.Errorf("--deadline: %s", ce.Problem)
		}
		field = "Classes"
	}
	if f, ok := configFlags[field]; ok {
		return fmt.Errorf("%s: %s", f, ce.Problem)
	}
	return err
}
