package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/gateway/observe"
)

func init() {
	register("serve", "run the gateway: an OpenAI-compatible reverse proxy with admission control", runServe)
	register("check-config", "validate a gateway config file", runCheckConfig)
	register("hash-key", "print the SHA-256 digest of a tenant API key read from stdin, for the config", runHashKey)
}

// serveFlags are the flags that override the config file.
type serveFlags struct {
	config      string
	upstream    string
	concurrency int
	listen      string
	admin       string
	maxQueue    int
	apiKeyEnv   string
	initial     time.Duration
	pprof       bool
	logFormat   string
	batchDB     string
	mode        string

	// batchDefaulted: batch.path was unset and load filled in the state
	// directory's; batchFallback: that file was in use by another sluice,
	// so this one serves without the Batch API (and a reload keeps it so).
	batchDefaulted, batchFallback bool
}

func (f *serveFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.config, "config", "", "YAML config `file` (flags below override it)")
	fs.StringVar(&f.upstream, "upstream", "", "provider base `URL`, e.g. https://api.openai.com")
	fs.IntVar(&f.concurrency, "concurrency", 0, "upstream calls allowed at once (default: learnt from the provider's latencies and 429s, from 4, at most 1000; see admission.learn)")
	fs.StringVar(&f.listen, "listen", "", "proxy `address` (default 127.0.0.1:8080)")
	fs.StringVar(&f.admin, "admin", "", "admin `address` for /metrics, /healthz, /readyz, /admin/v1/state (default 127.0.0.1:9090)")
	fs.IntVar(&f.maxQueue, "max-queue", 0, "hard bound on waiting requests; 0: no waiting room (default from the config, else concurrency × the longest class timeout ÷ the initial service time (1s when unset), between the concurrency and 1024)")
	fs.StringVar(&f.apiKeyEnv, "api-key-env", "", "environment `variable` holding the provider's API key")
	fs.DurationVar(&f.initial, "initial-service-time", 0, "service time assumed before the first call completes")
	fs.BoolVar(&f.pprof, "admin-pprof", false, "serve the Go runtime's profiles at /debug/pprof/ on the admin listener (admin_pprof)")
	fs.StringVar(&f.logFormat, "log-format", "", "logs on standard error, one access-log line per request among them: `text` or json (log.format; default text)")
	fs.StringVar(&f.mode, "mode", "", "`enforce` or observe: decide every call and forward it regardless, counting and logging what would have been refused (mode; default enforce)")
	fs.StringVar(&f.batchDB, "batch-db", "", "`file` of the Batch API's store (batch.path; default $XDG_STATE_HOME/sluice/batch.db, else ~/.local/state/sluice/batch.db)")
}

// load reads the config file, if any, and applies the flags that were set.
func (f *serveFlags) load(fs *flag.FlagSet) (config.Config, error) {
	var cfg config.Config
	if f.config != "" {
		var err error
		if cfg, err = config.Load(f.config); err != nil {
			return cfg, err
		}
	}
	var bad error
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "upstream":
			if len(cfg.Upstreams) > 0 {
				bad = fmt.Errorf("--upstream: the config (%s) sets upstreams: (several deployments); --upstream sets the single upstream.url — use one or the other", f.config)
			}
			cfg.Upstream.URL = f.upstream
		case "concurrency":
			if f.concurrency < 1 {
				bad = fmt.Errorf("--concurrency: %d, want ≥ 1", f.concurrency)
			}
			if len(cfg.Upstreams) > 0 {
				bad = fmt.Errorf("--concurrency: the config (%s) sets upstreams:, whose concurrency is set per deployment and model (upstreams[i].concurrency)", f.config)
			}
			cfg.Admission.Concurrency = f.concurrency
		case "listen":
			cfg.Listen = f.listen
		case "admin":
			cfg.Admin = f.admin
		case "max-queue":
			if f.maxQueue < 0 {
				bad = fmt.Errorf("--max-queue: %d, want ≥ 0", f.maxQueue)
			}
			cfg.Admission.MaxQueue = &f.maxQueue
		case "api-key-env":
			if len(cfg.Upstreams) > 0 {
				bad = fmt.Errorf("--api-key-env: the config (%s) sets upstreams:, whose keys are set per deployment (upstreams[i].api_key_env)", f.config)
			}
			cfg.Upstream.APIKeyEnv = f.apiKeyEnv
		case "initial-service-time":
			if f.initial < 0 {
				bad = fmt.Errorf("--initial-service-time: %v, want ≥ 0", f.initial)
			}
			cfg.Admission.InitialServiceTime = config.Duration(f.initial)
		case "admin-pprof":
			cfg.AdminPprof = f.pprof
		case "log-format":
			if f.logFormat != observe.LogFormatText && f.logFormat != observe.LogFormatJSON {
				bad = fmt.Errorf("--log-format: %q, want text or json", f.logFormat)
			}
			cfg.Log.Format = f.logFormat
		case "batch-db":
			cfg.Batch.Path = f.batchDB
		case "mode":
			if f.mode != chain.ModeEnforce && f.mode != chain.ModeObserve {
				bad = fmt.Errorf("--mode: %q, want enforce or observe", f.mode)
			}
			cfg.Mode = f.mode
		}
	})
	// The Batch API is on by default: its store lives in the state
	// directory unless the config says where, turns it off, or forwards
	// /v1/files and /v1/batches to the provider (passthrough).
	f.batchDefaulted = false
	if cfg.Batch.Path == "" && !cfg.Batch.Disabled && !cfg.PassesBatchThrough() {
		if f.batchFallback {
			cfg.Batch.Disabled = true
		} else if p, err := gateway.DefaultBatchPath(); err == nil {
			cfg.Batch.Path, f.batchDefaulted = p, true
		}
	}
	if bad != nil {
		return cfg, bad
	}
	if f.config == "" && cfg.Upstream.URL == "" {
		return cfg, errors.New("--upstream (or --config) is required")
	}
	// Without --concurrency (nor admission.concurrency) the gateway learns
	// it from the provider's answers (admission.learn's bounds).
	return cfg, cfg.Validate()
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f serveFlags
	f.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sluice serve (--upstream URL [--concurrency N] | --config FILE) [flags]")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
		fmt.Fprintln(stderr)
		fmt.Fprint(stderr, tracingHelp)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	cfg, err := f.load(fs)
	if err != nil {
		return err
	}
	logger := cfg.Log.Logger(stderr)
	tp, shutdownTracing, err := tracerProvider(ctx, os.Getenv, logger)
	if err != nil {
		return err
	}
	if tp != nil {
		defer func() {
			// The spans still queued, within a bounded wait: a collector
			// that is down must not hold the exit.
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := shutdownTracing(sctx); err != nil {
				logger.Warn("tracing: flushing the last spans failed", "err", err)
			}
		}()
		logger.Info("tracing on: spans go over OTLP/HTTP as the OTEL_* environment says")
	}
	opts := gateway.Options{Logger: logger, TracerProvider: tp, ConfigSource: f.configSource(fs)}
	g, err := gateway.New(cfg, opts)
	if err != nil && f.batchDefaulted && gateway.IsBatchStoreInUse(err) {
		// Another sluice on this machine holds the default store: serve
		// without batches rather than not at all, and say so.
		logger.Warn("the Batch API is off: its default store is in use by another sluice; set batch.path (or --batch-db) to give this one its own",
			"path", cfg.Batch.Path)
		f.batchFallback = true
		if cfg, err = f.load(fs); err == nil {
			g, err = gateway.New(cfg, opts)
		}
	}
	if err != nil {
		return err
	}
	// SIGHUP re-reads the config (POST /admin/v1/reload does too).
	hup, stopHup := notifyHangup()
	defer stopHup()
	hupCtx, stopReloads := context.WithCancel(ctx)
	defer reloadOnSignal(hupCtx, hup, g.Reload)()
	defer stopReloads()
	srv, err := gateway.Listen(g)
	if err != nil {
		return err
	}
	if cfg.AdminPprof {
		srv.AdminHandler = withPprof(srv.AdminHandler)
	}
	fmt.Fprintf(stdout, "sluice listening on http://%s (admin http://%s)\n", srv.API.Addr(), srv.Admin.Addr())
	if l := cfg.WithDefaults().Learning(); len(l) == 1 && l[0] != nil {
		fmt.Fprintf(stdout, "concurrency: learnt from the provider's answers, from %d (between %d and %d; --concurrency N fixes it)\n", l[0].Initial, l[0].Min, l[0].Max)
	}
	return srv.Serve(ctx)
}

func runCheckConfig(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("check-config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: sluice check-config FILE")
	}
	cfg, err := config.Load(fs.Arg(0))
	if err != nil {
		return err
	}
	n, derived := cfg.EffectiveMaxQueue()
	how := "as set (admission.max_queue)"
	if derived {
		how = "derived: concurrency × the longest class timeout ÷ the initial service time (1s when unset), between the concurrency and 1024; set admission.max_queue to choose"
	}
	rc, err := cfg.Routing()
	if err != nil {
		return err
	}
	if rc == nil {
		fmt.Fprintf(stdout, "%s: ok\nwaiting room: max_queue %d, %s\n", fs.Arg(0), n, how)
		return nil
	}
	if derived {
		how = "derived per pool: its concurrency × the longest class timeout ÷ the initial service time (1s when unset), between the concurrency and 1024; set admission.max_queue to choose"
	}
	fmt.Fprintf(stdout, "%s: ok\n", fs.Arg(0))
	printRouting(stdout, rc, how)
	return nil
}

// printRouting prints the pools of a config with upstreams, their routes
// and the ladder under load.
func printRouting(w io.Writer, rc *chain.RoutingConfig, how string) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "pool\tflavour\tconcurrency\tmax_queue\trpm\ttpm")
	limit := func(n int64) string {
		if n == 0 {
			return "-"
		}
		return strconv.FormatInt(n, 10)
	}
	for _, p := range rc.Pools {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", p.Name, p.Flavour, p.Admission.Concurrency, p.Admission.MaxQueue, limit(p.RPM), limit(p.TPM))
	}
	tw.Flush()
	fmt.Fprintf(w, "waiting room: %s\nroutes (failover order):\n", how)
	models := make([]string, 0, len(rc.Routes))
	for m := range rc.Routes {
		models = append(models, m)
	}
	sort.Strings(models)
	for _, m := range models {
		fmt.Fprintf(w, "  %s → %s\n", m, strings.Join(rc.Routes[m], ", "))
	}
	if len(rc.Ladder) > 0 {
		fmt.Fprintln(w, "degrade under load:")
		from := make([]string, 0, len(rc.Ladder))
		for m := range rc.Ladder {
			from = append(from, m)
		}
		sort.Strings(from)
		for _, m := range from {
			fmt.Fprintf(w, "  %s → %s\n", m, rc.Ladder[m])
		}
		classes := "none (only calls sending X-Sluice-Degrade: allow)"
		if len(rc.DegradeClasses) > 0 {
			classes = strings.Join(rc.DegradeClasses, ", ")
		}
		fmt.Fprintf(w, "  classes degraded without asking: %s\n", classes)
	}
}

func runHashKey(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("hash-key", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	key, err := io.ReadAll(io.LimitReader(stdinReader, 1<<16))
	if err != nil {
		return err
	}
	k := string(trimNewline(key))
	if k == "" {
		return errors.New("no key on standard input (echo -n KEY | sluice hash-key)")
	}
	fmt.Fprintln(stdout, gateway.HashKey(k))
	return nil
}

func trimNewline(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// withPprof adds the Go runtime's profiles under /debug/pprof/ to the admin
// handler.
func withPprof(admin http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", admin)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
