package promise

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/loopback"
	"github.com/sluicehq/sluice/loadgen"
	"github.com/sluicehq/sluice/mockllm"
)

// HTTPOptions configure RunHTTP.
type HTTPOptions struct {
	// Bin is the sluice binary to run as `sluice mock` and `sluice
	// serve`. Required.
	Bin string
	// GatewayBin, when set, runs `sluice serve` from another binary — an
	// older release, say — against the same mock and load: a baseline
	// measured in the same run.
	GatewayBin string
	// Seed seeds the arrivals and the mock's service times.
	Seed uint64
	// Window is how long the measured run sends arrivals. Zero means 6s.
	Window time.Duration
	// Redis is the address (host:port) of a Redis the replicas share;
	// required by the scenarios with replicas.
	Redis string
	// Dir holds the config files a scenario needs. Empty means a
	// temporary directory, removed afterwards.
	Dir string
	// Concurrency, when positive, tells the gateways the provider's
	// concurrency (--concurrency N, admission.concurrency: N). Zero runs
	// them as a user does who says nothing: the concurrency is learnt
	// from the provider's answers (docs/learned-concurrency.md) — except
	// for replicas, which share a configured one by leases (store.redis
	// requires it), and are told Slots.
	Concurrency int
}

// warmUp is how long the gateways serve half the capacity before a run:
// a second, some 35 calls, more than a service-time window needs to trust
// a model's own statistics.
const warmUp = time.Second

// The mock's median: the load's model, gpt-4o-mini, runs at half the
// mock's latency in its table, so a median of 400ms serves it in 200ms.
const mockMedian = 2 * Median

// RunHTTP runs sc with callers v over real HTTP on loopback: `sluice
// mock` with Slots slots, in front of it `sluice serve --upstream U`
// (--concurrency opt.Concurrency when it is set; a config file only for
// what flags cannot say: tenants' keys, the Redis of replicas), driven by
// package loadgen — the
// load generator of `sluice load` — with naive callers that retry twice
// at once and give each attempt their deadline.
func RunHTTP(ctx context.Context, sc Scenario, v Variant, opt HTTPOptions) (*Result, error) {
	if opt.Bin == "" {
		return nil, errors.New("promise: HTTPOptions.Bin is required")
	}
	if opt.Window == 0 {
		opt.Window = 6 * time.Second
	}
	if sc.Production != nil {
		return runProductionHTTP(ctx, sc, v, opt)
	}
	if sc.Replicas > 1 && opt.Redis == "" {
		return nil, fmt.Errorf("promise: %s runs %d replicas: HTTPOptions.Redis is required", sc.Name, sc.Replicas)
	}
	if opt.Dir == "" {
		dir, err := os.MkdirTemp("", "sluice-promise-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		opt.Dir = dir
	}
	// Arrivals stop after the window; callers wait at most 30s past it.
	ctx, cancel := context.WithTimeout(ctx, opt.Window+2*time.Minute)
	defer cancel()
	start := time.Now()
	var procs procs
	defer procs.stop()

	mockArgs := []string{"mock", "--listen", "127.0.0.1:0", "--slots", fmt.Sprint(Slots),
		"--median", mockMedian.String(), "--sigma", fmt.Sprint(Sigma), "--seed", fmt.Sprint(opt.Seed)}
	mock, err := procs.start(ctx, opt.Bin, mockArgs, mockAddr)
	if err != nil {
		return nil, fmt.Errorf("sluice mock: %w", err)
	}
	mockURL := "http://" + mock

	target, err := startGateways(ctx, &procs, sc, mockURL, opt)
	if err != nil {
		return nil, err
	}
	trace := traceLimits(ctx, procs.admins)
	// The gateway has served traffic before the storm: a warm-up at half
	// the capacity, not measured, gives it the service times the
	// simulator's gate starts from (see RunSim).
	warm := sc
	warm.Load = 0.5
	warmOpt := opt
	warmOpt.Window = warmUp
	if _, err := drive(ctx, warm, Variant{}, warmOpt, target); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	// One phase, or with a slowdown two: the provider at its speed, then
	// slowed for as long again — the gateway's estimates, learnt on the
	// fast provider, must follow it down.
	windows := []time.Duration{opt.Window}
	if sc.Slowdown > 1 {
		windows = []time.Duration{opt.Window, opt.Window}
	}
	var phases []phase
	for i, w := range windows {
		if i > 0 {
			if err := post(ctx, mockURL+mockllm.PathSlowdown, fmt.Sprintf(`{"factor": %g}`, sc.Slowdown)); err != nil {
				return nil, fmt.Errorf("slowing the mock down: %w", err)
			}
		}
		before, err := mockStats(ctx, mockURL)
		if err != nil {
			return nil, err
		}
		o := opt
		o.Window = w
		reps, err := drive(ctx, sc, v, o, target)
		if err != nil {
			return nil, err
		}
		after, err := mockStats(ctx, mockURL)
		if err != nil {
			return nil, err
		}
		phases = append(phases, phase{window: w, reps: reps, before: before, after: after})
	}
	r := tally(sc, v, phases)
	r.Declared = !v.Undeclared
	r.Learnt = opt.Concurrency == 0 && sc.Replicas <= 1
	for _, admin := range procs.admins {
		n, err := recognised(ctx, "http://"+admin)
		if err != nil {
			return nil, err
		}
		r.Recognised += n
	}
	r.Limits = trace()
	r.Seconds = time.Since(start).Seconds()
	return r, nil
}

// traceEvery is how often traceLimits reads the gateways' concurrency.
const traceEvery = 250 * time.Millisecond

// traceLimits reads the concurrency of each gateway's gate from its admin
// listener every traceEvery, from the warm-up on, until the returned
// function is called, which returns the readings (one slice per gateway).
// They are what a learnt concurrency did in the run; a configured one
// reads flat.
func traceLimits(ctx context.Context, admins []string) func() [][]int {
	ctx, cancel := context.WithCancel(ctx)
	out := make([][]int, len(admins))
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(traceEvery)
		defer tick.Stop()
		for {
			for i, a := range admins {
				n, err := gateConcurrency(ctx, "http://"+a)
				if err != nil {
					n = -1
				}
				out[i] = append(out[i], n)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() [][]int {
		cancel()
		<-done
		return out
	}
}

// gateConcurrency reads a gateway's concurrency from its state dump.
func gateConcurrency(ctx context.Context, admin string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, admin+"/admin/v1/state", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var st struct {
		Concurrency int `json:"concurrency"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return 0, err
	}
	return st.Concurrency, nil
}

// phase is one run of the load generators and the mock's figures before
// and after it.
type phase struct {
	window        time.Duration
	reps          map[string]*loadgen.Report
	before, after *mockllm.Stats
}

// startGateways starts the scenario's gateways and returns the address
// callers send to: the one gateway's, or a round-robin balancer's in front
// of the replicas.
func startGateways(ctx context.Context, procs *procs, sc Scenario, upstream string, opt HTTPOptions) (string, error) {
	var cfg strings.Builder
	for _, t := range tenants(sc) {
		if cfg.Len() == 0 {
			cfg.WriteString("tenants:\n")
		}
		fmt.Fprintf(&cfg, "  - {name: %s, api_keys_sha256: [%s]}\n", t, gateway.HashKey(tenantKey(t)))
	}
	if sc.Replicas > 1 {
		fmt.Fprintf(&cfg, "store: {redis: {url: \"redis://%s\", cluster: %q}}\n", opt.Redis, fmt.Sprintf("promise-%d", time.Now().UnixNano()))
	}
	args := []string{"serve", "--upstream", upstream, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"}
	if opt.Concurrency == 0 && sc.Replicas > 1 {
		opt.Concurrency = Slots
	}
	if opt.Concurrency > 0 {
		args = append(args, "--concurrency", fmt.Sprint(opt.Concurrency))
	}
	if cfg.Len() > 0 {
		// The file must name the provider to be valid on its own; the
		// flags say the same, and everything else is the defaults.
		// With tenants, the provider's own key replaces theirs.
		fmt.Fprintf(&cfg, "upstream: {url: %q, api_key_env: %s}\n", upstream, providerKeyEnv)
		if opt.Concurrency > 0 {
			fmt.Fprintf(&cfg, "admission: {concurrency: %d}\n", opt.Concurrency)
		}
		path := filepath.Join(opt.Dir, sc.Name+".yaml")
		if err := os.WriteFile(path, []byte(cfg.String()), 0o600); err != nil {
			return "", err
		}
		args = append(args, "--config", path)
	}
	n := max(sc.Replicas, 1)
	addrs := make([]string, n)
	bin := cmp.Or(opt.GatewayBin, opt.Bin)
	for i := range n {
		addr, err := procs.start(ctx, bin, args, serveAddr)
		if err != nil {
			return "", fmt.Errorf("sluice serve: %w", err)
		}
		addrs[i] = addr
	}
	if n == 1 {
		return "http://" + addrs[0], nil
	}
	return procs.balance(addrs)
}

// tenants are the scenario's named tenants, in order of appearance.
func tenants(sc Scenario) []string {
	var out []string
	for _, s := range sc.Sources {
		if s.Tenant != "" && !slices.Contains(out, s.Tenant) {
			out = append(out, s.Tenant)
		}
	}
	return out
}

func tenantKey(tenant string) string { return "sk-promise-" + tenant }

// providerKeyEnv names the variable the gateway reads the provider's key
// from; the mock takes any.
const providerKeyEnv = "SLUICE_PROMISE_PROVIDER_KEY"

// drive sends the scenario's traffic at target for opt.Window: one load
// generator per tenant (each with its key), all at once, and returns their
// reports by tenant ("" for the anonymous one).
func drive(ctx context.Context, sc Scenario, v Variant, opt HTTPOptions, target string) (map[string]*loadgen.Report, error) {
	groups := map[string][]Source{}
	var order []string
	for _, s := range sc.Sources {
		if _, ok := groups[s.Tenant]; !ok {
			order = append(order, s.Tenant)
		}
		groups[s.Tenant] = append(groups[s.Tenant], s)
	}
	headers := loadgen.AttemptHeadersBoth
	if v.Undeclared {
		headers = loadgen.AttemptHeadersNone
	}
	policy, err := loadgen.PolicyByName("naive")
	if err != nil {
		return nil, err
	}
	var (
		mu    sync.Mutex
		reps  = map[string]*loadgen.Report{}
		first error
		wg    sync.WaitGroup
	)
	for i, tenant := range order {
		var share float64
		var classes []loadgen.Class
		for _, s := range groups[tenant] {
			share += s.Share
			classes = append(classes, loadgen.Class{Name: s.Class, Weight: s.Share, Deadline: s.Deadline, AttemptTimeout: s.Deadline})
		}
		cfg := loadgen.Config{
			Target:         target,
			Rate:           sc.Load * NominalCapacity() * share,
			Duration:       opt.Window,
			Classes:        classes,
			Policy:         policy,
			MaxAttempts:    3,
			SamePrompt:     v.SamePrompt,
			AttemptHeaders: headers,
			MaxInFlight:    20_000,
			Seed:           opt.Seed + uint64(i),
		}
		if tenant != "" {
			cfg.APIKey = tenantKey(tenant)
		}
		wg.Go(func() {
			rep, err := loadgen.Run(ctx, cfg)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = fmt.Errorf("load of tenant %q: %w", tenant, err)
			}
			reps[tenant] = rep
		})
	}
	wg.Wait()
	return reps, first
}

// tally turns the phases into a Result. Goodput is the on-time answers
// of every phase's window over what the provider could have served in
// them: each phase's window times its capacity as the mock realised it
// (slots over the mean service time it drew for the phase's calls).
func tally(sc Scenario, v Variant, phases []phase) *Result {
	r := &Result{Scenario: sc.Name, Variant: v.String(), Way: "http", Success: map[string]float64{}, PeakInFlight: -1}
	var good, servable float64
	var started, onTime, attempts, unanswered int64
	requests, answered := map[string]int{}, map[string]int{}
	for _, ph := range phases {
		for tenant, rep := range ph.reps {
			good += rep.Goodput * ph.window.Seconds()
			onTime += int64(rep.OnTime)
			attempts += int64(rep.Attempts)
			unanswered += int64(rep.Unanswered)
			if rep.RefusalTime.Count > 0 {
				// Percentiles of separate runs do not merge; the worst
				// of them bounds the whole's.
				r.RefusalP99Ms = max(r.RefusalP99Ms, rep.RefusalTime.P99Ms)
				r.Refusals += rep.RefusalTime.Count
			}
			for _, c := range rep.Classes {
				name := Source{Tenant: tenant, Class: c.Name}.Name()
				requests[name] += c.Requests
				answered[name] += c.OnTime
			}
		}
		started += ph.after.Started - ph.before.Started
		completed := ph.after.Completed - ph.before.Completed
		if busy := ph.after.ServiceSeconds - ph.before.ServiceSeconds; completed > 0 && busy > 0 {
			servable += ph.window.Seconds() * Slots / (busy / float64(completed))
		}
		r.PeakInFlight = max(r.PeakInFlight, int(ph.after.PeakInFlight))
	}
	if servable > 0 {
		r.GoodputPct = 100 * good / servable
	}
	if started > 0 {
		r.WastePct = 100 * math.Max(0, float64(started-onTime)) / float64(started)
	}
	if attempts > 0 {
		r.UnansweredPct = 100 * float64(unanswered) / float64(attempts)
	}
	for name, n := range requests {
		if n > 0 {
			r.Success[name] = 100 * float64(answered[name]) / float64(n)
		}
	}
	return r
}

// recognised reads, from a gateway's admin listener, how many calls it
// took for retries by their fingerprint (sluice_retries_recognised_total
// {how="fingerprint"}), as a scrape would.
func recognised(ctx context.Context, admin string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, admin+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("the gateway's metrics: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), `sluice_retries_recognised_total{how="fingerprint"} `); ok {
			var n float64
			if _, err := fmt.Sscan(v, &n); err != nil {
				return 0, fmt.Errorf("the gateway's metrics: %q: %w", sc.Text(), err)
			}
			return int(n), nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("the gateway's metrics: %w", err)
	}
	return 0, errors.New("the gateway's metrics: no sluice_retries_recognised_total{how=\"fingerprint\"}")
}

func mockStats(ctx context.Context, base string) (*mockllm.Stats, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/mock/v1/stats", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("the mock's stats: %w", err)
	}
	defer resp.Body.Close()
	var st mockllm.Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("the mock's stats: %w", err)
	}
	return &st, nil
}

func post(ctx context.Context, u, body string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(b))
	}
	return nil
}

// The lines the commands print once they listen.
var (
	mockAddr  = regexp.MustCompile(`listening on http://(\S+)`)
	serveAddr = regexp.MustCompile(`sluice listening on http://(\S+) \(admin http://(\S+)\)`)
)

// procs are the processes and servers of one run, stopped together.
type procs struct {
	cmds   []*exec.Cmd
	stops  []func()
	admins []string // the gateways' admin addresses
}

// start runs bin with args and returns the address its standard output
// announces (the first submatch of addr, and the second, if any, in
// p.admins), once it does.
func (p *procs) start(ctx context.Context, bin string, args []string, addr *regexp.Regexp) (string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), providerKeyEnv+"=sk-mock")
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	p.cmds = append(p.cmds, cmd)
	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() {
			if m := addr.FindStringSubmatch(sc.Text()); m != nil && !sent {
				found <- m
				sent = true
			}
		}
		if !sent {
			close(found)
		}
	}()
	select {
	case m, ok := <-found:
		if !ok {
			return "", fmt.Errorf("%s %s exited without listening: %s", filepath.Base(bin), args[0], stderr.String())
		}
		if len(m) > 2 {
			p.admins = append(p.admins, m[2])
		}
		return m[1], nil
	case <-time.After(30 * time.Second):
		return "", fmt.Errorf("%s %s did not say where it listens within 30s: %s", filepath.Base(bin), args[0], stderr.String())
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// balance serves a round-robin reverse proxy over addrs on loopback, as
// a load balancer in front of replicas does, and returns its URL.
func (p *procs) balance(addrs []string) (string, error) {
	var next atomic.Uint64
	targets := make([]*url.URL, len(addrs))
	for i, a := range addrs {
		targets[i] = &url.URL{Scheme: "http", Host: a}
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(targets[next.Add(1)%uint64(len(targets))])
			pr.Out.Host = pr.In.Host
		},
		Transport: &http.Transport{MaxIdleConnsPerHost: 1024},
		// A caller that gives up mid-call is the run's business, not an
		// error to print.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	u, stop, err := loopback.Serve(rp, time.Second)
	if err != nil {
		return "", err
	}
	p.stops = append(p.stops, stop)
	return u, nil
}

// stop ends every process (interrupt, then kill after 10s) and server.
func (p *procs) stop() {
	for _, s := range p.stops {
		s()
	}
	for _, c := range p.cmds {
		_ = c.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = c.Process.Kill()
			<-done
		}
	}
}

// lockedBuffer is a bytes.Buffer safe for the writer goroutine exec
// starts and a reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
