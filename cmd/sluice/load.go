package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/loadgen"
	"github.com/sluicehq/sluice/workload"
)

func init() {
	register("load", "send open-loop Poisson load, or replay a trace, at a gateway or provider and report goodput", runLoad)
}

// traceService names the one service of a trace whose calls name none (a
// trace without a service column, as Azure's are published), in the
// per-service flags and the report.
const traceService = "trace"

// tracePriority is the X-Sluice-Priority of a trace's services unless
// --priority says otherwise: a production trace is people and programs
// waiting for answers.
const tracePriority = "interactive"

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
		fmt.Fprintln(stderr, "       sluice load --target URL --trace FILE [--speed F] [flags]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Sends POST {target}/v1/chat/completions as an open-loop Poisson process and")
		fmt.Fprintln(stderr, "reports what callers experienced: goodput (answers inside their deadline")
		fmt.Fprintln(stderr, "per second), success per class, latency, attempts per request, rejections,")
		fmt.Fprintln(stderr, "attempts left unanswered by their caller's own timeout, and time to a refusal.")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "With --trace it replays a CSV trace of production calls instead (columns")
		fmt.Fprintln(stderr, "timestamp, context_tokens, generated_tokens, optional service, max_tokens,")
		fmt.Fprintln(stderr, "deadline_ms): each call at its offset (divided by --speed), as its service")
		fmt.Fprintln(stderr, "(--deadline, --priority, --service-key, --service-max-tokens per service), with")
		fmt.Fprintln(stderr, "a prompt of about 4 characters a token and X-Mock-Output-Tokens: the answer's")
		fmt.Fprintln(stderr, "recorded length, which sluice mock writes (a real provider ignores it).")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	var (
		target           = fs.String("target", "", "base URL of the gateway or provider, e.g. http://127.0.0.1:8080 (required)")
		rate             = fs.Float64("rate", 10, "mean arrival rate, logical requests per second (not with --trace: use --speed)")
		duration         = fs.Duration("duration", 10*time.Second, "how long arrivals are generated; 0 needs --max-requests (with --trace: the whole trace unless given, and the replay stops there when it is)")
		mix              = fs.String("mix", defaultMix, "class mix as name=weight,...; weights are relative (not with --trace: its services are the classes)")
		trace            = fs.String("trace", "", "replay this CSV trace instead of Poisson arrivals (see above)")
		speed            = fs.Float64("speed", 1, "with --trace: play it this many times faster (2: twice the rate)")
		deadline         = fs.String("deadline", "", "class (or --trace service) deadlines as name=duration,... (defaults: interactive=10s,batch=30s,speculative=5s; a trace's services have none but their calls' deadline_ms)")
		priority         = fs.String("priority", "", "X-Sluice-Priority per class or service as name=priority,... (default: the class's name; interactive for a trace's services)")
		serviceKey       = fs.String("service-key", "", "API key per class or service as name=key,... (default: --api-key)")
		serviceMaxTokens = fs.String("service-max-tokens", "", "max_tokens per class or service as name=N,... (default: --max-tokens; a trace call's own max_tokens wins)")
		policy           = fs.String("policy", "naive", "client behaviour: "+strings.Join(loadgen.PolicyNames(), " or "))
		maxAttempts      = fs.Int("max-attempts", loadgen.DefaultMaxAttempts, "attempts per logical request, the first included")
		attemptTimeout   = fs.Duration("attempt-timeout", 0, "naive's fixed per-attempt timeout; 0 means half the request's deadline")
		model            = fs.String("model", loadgen.DefaultModel, "model field of the request body")
		maxTokens        = fs.Int("max-tokens", loadgen.DefaultMaxTokens, "max_tokens field of the request body, for every class or service without --service-max-tokens (a trace call's own max_tokens wins)")
		stream           = fs.Bool("stream", false, "request server-sent-event streams; answers count at their last byte")
		samePrompt       = fs.Bool("same-prompt", false, "send every request with the same bytes (no per-request \"seed\"), as load tools and popular prompts do")
		attemptHeaders   = fs.String("attempt-headers", string(loadgen.AttemptHeadersSluice), "headers that declare each attempt's number and deadline: sluice, stainless (the OpenAI SDKs' X-Stainless-*), both, or none (no attempt number)")
		apiKey           = fs.String("api-key", "", "sent as Authorization: Bearer <key>, by every class or service without --service-key; empty sends none")
		maxRequests      = fs.Int("max-requests", 0, "hard bound on logical requests; 0 means no bound but --duration (or the trace's end)")
		maxInFlight      = fs.Int("max-in-flight", loadgen.DefaultMaxInFlight, "cap on concurrent attempts; arrivals beyond it count as client_overflow")
		seed             = fs.Uint64("seed", 1, "seed of the arrival schedule and class draws (no part in a --trace replay)")
		asJSON           = fs.Bool("json", false, "print the report as JSON")
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
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	settings, err := parseClassSettings(*deadline, *priority, *serviceKey, *serviceMaxTokens)
	if err != nil {
		return loadgen.Config{}, false, err
	}
	var (
		tr      *workload.Trace
		classes []loadgen.Class
	)
	if *trace != "" {
		// The trace is the schedule and its services the classes: a rate
		// or a mix beside it would be silently overruled.
		switch {
		case given["rate"]:
			return loadgen.Config{}, false, errors.New("--rate: not with --trace: the trace's arrival times are the schedule (--speed plays it faster)")
		case given["mix"]:
			return loadgen.Config{}, false, errors.New("--mix: not with --trace: the trace's services are the classes")
		case *samePrompt:
			return loadgen.Config{}, false, errors.New("--same-prompt: not with --trace: each call's prompt is its own size")
		case math.IsNaN(*speed) || math.IsInf(*speed, 0) || *speed <= 0:
			return loadgen.Config{}, false, fmt.Errorf("--speed: must be a positive factor (2: twice as fast), got %v", *speed)
		}
		if tr, err = workload.ReadFile(*trace); err != nil {
			return loadgen.Config{}, false, fmt.Errorf("--trace: %v", err)
		}
		if *speed != 1 {
			if tr, err = tr.Faster(*speed); err != nil {
				return loadgen.Config{}, false, fmt.Errorf("--speed: %v", err)
			}
		}
		if classes, err = traceClasses(*trace, tr, settings); err != nil {
			return loadgen.Config{}, false, err
		}
		if !given["duration"] {
			*duration = 0 // the whole trace
		}
		*rate = 0
	} else {
		if given["speed"] {
			return loadgen.Config{}, false, errors.New("--speed: only with --trace")
		}
		if *duration == 0 && *maxRequests == 0 {
			return loadgen.Config{}, false, errors.New("--duration 0 needs --max-requests N, or the run would never stop")
		}
		if classes, err = parseClasses(*mix, settings); err != nil {
			return loadgen.Config{}, false, err
		}
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
		Trace:          tr,
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

// classSettings are the per-class (with --trace, per-service) flags, by
// name, each with its names in the order given.
type classSettings struct {
	deadlines  map[string]time.Duration
	priorities map[string]string
	keys       map[string]string
	maxTokens  map[string]int
	order      map[string][]string // by flag
}

func parseClassSettings(deadlines, priorities, keys, maxTokens string) (*classSettings, error) {
	cs := &classSettings{order: map[string][]string{}}
	var err error
	if cs.deadlines, cs.order["--deadline"], err = parsePairs("--deadline", deadlines, func(v string) (time.Duration, error) {
		d, err := time.ParseDuration(v)
		if err != nil {
			return 0, fmt.Errorf("%q is not a duration (e.g. 10s, 1500ms)", v)
		}
		if d <= 0 {
			return 0, fmt.Errorf("must be positive, got %v", d)
		}
		return d, nil
	}); err != nil {
		return nil, err
	}
	if cs.priorities, cs.order["--priority"], err = parsePairs("--priority", priorities, func(v string) (string, error) {
		if !classNameRE.MatchString(v) {
			return "", fmt.Errorf("priority %q may hold only letters, digits, '-' and '_'", v)
		}
		return v, nil
	}); err != nil {
		return nil, err
	}
	if cs.keys, cs.order["--service-key"], err = parsePairs("--service-key", keys, func(v string) (string, error) { return v, nil }); err != nil {
		return nil, err
	}
	if cs.maxTokens, cs.order["--service-max-tokens"], err = parsePairs("--service-max-tokens", maxTokens, func(v string) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("%q is not a whole number of at least 1", v)
		}
		return n, nil
	}); err != nil {
		return nil, err
	}
	return cs, nil
}

// only reports the first name a per-class flag gives that is not among
// names: `class "x" is not in --mix (classes: a, b)`.
func (cs *classSettings) only(names []string, what, whats, where string) error {
	for _, f := range []string{"--deadline", "--priority", "--service-key", "--service-max-tokens"} {
		for _, name := range cs.order[f] {
			if !slices.Contains(names, name) {
				return fmt.Errorf("%s: %s %q is not in %s (%s: %s)", f, what, name, where, whats, strings.Join(names, ", "))
			}
		}
	}
	return nil
}

// class is the class name with its per-class settings; the deadline is
// left to the caller, whose defaults differ.
func (cs *classSettings) class(name, defaultPriority string) loadgen.Class {
	return loadgen.Class{
		Name:      name,
		Priority:  cmp.Or(cs.priorities[name], defaultPriority),
		APIKey:    cs.keys[name],
		MaxTokens: cs.maxTokens[name],
	}
}

// parseClasses builds the class list from --mix and the per-class flags.
// Classes keep the order of --mix, so reports list them as the user wrote
// them.
func parseClasses(mix string, cs *classSettings) ([]loadgen.Class, error) {
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
	if err := cs.only(order, "class", "classes", "--mix"); err != nil {
		return nil, err
	}
	classes := make([]loadgen.Class, 0, len(order))
	for _, name := range order {
		d, ok := cs.deadlines[name]
		if !ok {
			d, ok = defaultDeadlines[name]
		}
		if !ok {
			return nil, fmt.Errorf("--deadline: class %q has no default deadline; add %s=<duration>", name, name)
		}
		cl := cs.class(name, "") // the priority is the name, as it always was
		cl.Weight, cl.Deadline = weights[name], d
		classes = append(classes, cl)
	}
	return classes, nil
}

// traceClasses builds the class list of a trace read from path: one class
// per service, in order of first appearance (one, named traceService,
// when its calls name none), with the per-service flags. A service needs
// a deadline from --deadline unless every one of its calls has its own.
func traceClasses(path string, t *workload.Trace, cs *classSettings) ([]loadgen.Class, error) {
	services := t.Services()
	names := services
	if len(services) == 1 && services[0] == "" {
		names = []string{traceService}
	} else if slices.Contains(services, "") {
		return nil, fmt.Errorf("--trace: %s: some calls name a service and some none: name every call's or none", path)
	}
	for _, name := range names {
		if !classNameRE.MatchString(name) {
			return nil, fmt.Errorf("--trace: %s: service %q: a service's name may hold only letters, digits, '-' and '_' (it is a class name)", path, name)
		}
	}
	if err := cs.only(names, "service", "services", "the trace"); err != nil {
		return nil, err
	}
	// The first call of each service with no deadline of its own.
	undated := map[string]time.Duration{}
	for _, c := range t.Calls {
		if _, seen := undated[c.Service]; c.Deadline == 0 && !seen {
			undated[c.Service] = c.At
		}
	}
	classes := make([]loadgen.Class, 0, len(names))
	for i, name := range names {
		cl := cs.class(name, tracePriority)
		// Weights play no part in a replay: the trace says who sent each
		// call. A deadline left zero is each call's own.
		cl.Deadline = cs.deadlines[name]
		if at, ok := undated[services[i]]; ok && cl.Deadline == 0 {
			return nil, fmt.Errorf("--deadline: service %q has none, and its calls in %s carry no deadline_ms (the first at %v): add %s=<duration>",
				name, path, at, name)
		}
		classes = append(classes, cl)
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
	"Trace":          "--trace",
	"SamePrompt":     "--same-prompt",
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

// classFlags maps loadgen.Class fields to the per-class flags that set
// them; the others come from --mix.
var classFlags = map[string]string{
	".Deadline":  "--deadline",
	".Priority":  "--priority",
	".APIKey":    "--service-key",
	".MaxTokens": "--service-max-tokens",
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
		for suffix, f := range classFlags {
			if strings.HasSuffix(field, suffix) {
				return fmt.Errorf("%s: %s", f, ce.Problem)
			}
		}
		field = "Classes"
	}
	if f, ok := configFlags[field]; ok {
		return fmt.Errorf("%s: %s", f, ce.Problem)
	}
	return err
}
