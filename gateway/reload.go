package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/gateway/wire"
	"github.com/sluicehq/sluice/spend"
)

// Policies change without a restart: Reconfigure applies a new config to
// the running gateway, Reload re-reads it from Options.ConfigSource (POST
// /admin/v1/reload on the admin listener; SIGHUP in `sluice serve`).
//
// What changes: the tenants (names, keys, tiers, class rules, weights,
// caps, queue shares), the retry budgets (retries.budget and
// retries.per_tenant), the spend policy (prices, unknown model, ladder,
// ceiling, stages, rate window, budgets, alert thresholds), and the gate's
// concurrency and waiting room (admission.concurrency, max_queue,
// max_queue_per_tenant). Nothing queued or in flight is dropped, and
// nothing counted is reset: the spend books, the retry budgets' balances,
// the gate's service-time windows and counters, and the concurrency the
// provider's rate limits lowered all carry on.
//
// What does not: every other field — the listeners, the upstream, the
// deployments, routes and ladder under load (upstreams, routes, degrade;
// with upstreams also spend.ladder when degrade.ladder is empty), the
// store, the classes and ranks, the limits, the server's bounds, the
// idempotency store, pass-through paths, the estimator's settings, the
// upstream limit's and the gateway's own retries, the alert webhook and
// its timing, and whether there is a spend section or retry budgets at
// all. Their values live in listeners, connection pools, transports and
// the shape of the gate's queue, built once. A config that changes one of
// them is refused whole, naming the first such field, rather than applied
// in part with a warning: a reload either makes the running gateway what
// the file says or changes nothing, so the file never claims a policy
// the gateway does not run, and an operator who needs a restart is told
// so by the reload itself. A config that does not validate is refused the
// same way. Either way the running config stays.

// reloader is the gateway's reload state.
type reloader struct {
	source func() (config.Config, error) // nil: nothing to re-read

	mu      sync.Mutex                    // serializes reloads
	cur     atomic.Pointer[config.Config] // the config in force, with defaults
	written *config.Config                // the same as written; guarded by mu

	total    *prometheus.CounterVec // result
	lastOK   prometheus.Gauge       // unix seconds
	lastGood prometheus.Gauge       // 1 when the last reload was applied
	ok, bad  atomic.Uint64
	last     atomic.Pointer[reloadOutcome]
}

type reloadOutcome struct {
	at  time.Time
	err string
}

func newReloader(g *Gateway, written config.Config, source func() (config.Config, error)) *reloader {
	r := &reloader{
		source:  source,
		written: &written,
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_config_reloads_total", Help: "Config reloads (POST /admin/v1/reload, SIGHUP), by result: ok (applied) or error (refused; the running config stays).",
		}, []string{"result"}),
		lastOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_config_last_reload_success_timestamp_seconds", Help: "When the config in force was applied: the start, or the last reload that succeeded (unix seconds).",
		}),
		lastGood: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_config_last_reload_successful", Help: "1 when the last reload was applied (or none was tried), 0 when it was refused.",
		}),
	}
	cfg := g.cfg
	r.cur.Store(&cfg)
	r.total.WithLabelValues("ok")
	r.total.WithLabelValues("error")
	r.lastOK.SetToCurrentTime()
	r.lastGood.Set(1)
	g.metrics.reg.MustRegister(r.total, r.lastOK, r.lastGood)
	return r
}

// ReloadError is a refused reload: the config does not validate, cannot be
// read, or changes a field that only a restart changes. The running config
// stays.
type ReloadError struct {
	// Field is the YAML path of the offending field, when known.
	Field string
	// RestartRequired says the config is valid but changes Field, which
	// cannot change while the gateway runs.
	RestartRequired bool
	// Unavailable says there is nothing to re-read: the gateway has no
	// config source (sluice serve was started without --config).
	Unavailable bool
	Err         error
}

func (e *ReloadError) Error() string { return e.Err.Error() }
func (e *ReloadError) Unwrap() error { return e.Err }

// ErrNoConfigSource is the error of Reload on a gateway without
// Options.ConfigSource.
var ErrNoConfigSource = errors.New("reload: the gateway was started without a config file (sluice serve --config FILE): there is nothing to re-read")

// Reload re-reads the config from Options.ConfigSource and applies it
// with Reconfigure. The error is a *ReloadError.
func (g *Gateway) Reload() error {
	if g.reload.source == nil {
		return g.reloaded(&ReloadError{Unavailable: true, Err: ErrNoConfigSource})
	}
	cfg, err := g.reload.source()
	if err != nil {
		return g.reloaded(&ReloadError{Field: fieldOf(err), Err: err})
	}
	return g.Reconfigure(cfg)
}

// Reconfigure applies cfg to the running gateway (see the top of
// reload.go for what changes and what does not): it validates cfg whole,
// refuses it if it changes a field only a restart changes, then swaps the
// policy. The error is a *ReloadError naming the field; the running config
// then stays. Reloads are counted in sluice_config_reloads_total and
// logged, without keys.
func (g *Gateway) Reconfigure(cfg config.Config) error {
	r := g.reload
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.cur.Load()
	next, err := g.prepare(old, r.written, cfg)
	if err != nil {
		return g.reloaded(err)
	}
	if err := g.apply(next); err != nil {
		return g.reloaded(&ReloadError{Field: fieldOf(err), Err: err})
	}
	r.cur.Store(next.cfg)
	r.written = next.written
	g.log.Info("config reloaded", next.summary(old)...)
	return g.reloaded(nil)
}

// reloaded counts and logs a reload's outcome and returns err.
func (g *Gateway) reloaded(err error) error {
	r := g.reload
	now := time.Now()
	if err == nil {
		r.total.WithLabelValues("ok").Inc()
		r.lastOK.Set(float64(now.UnixNano()) / 1e9)
		r.lastGood.Set(1)
		r.ok.Add(1)
		r.last.Store(&reloadOutcome{at: now})
		return nil
	}
	r.total.WithLabelValues("error").Inc()
	r.lastGood.Set(0)
	r.bad.Add(1)
	r.last.Store(&reloadOutcome{at: now, err: err.Error()})
	var re *ReloadError
	attrs := []any{"err", err}
	if errors.As(err, &re) && re.Field != "" {
		attrs = append(attrs, "field", re.Field, "restart_required", re.RestartRequired)
	}
	g.log.Warn("config reload refused: the running config stays", attrs...)
	return err
}

// pending is a validated config ready to apply.
type pending struct {
	cfg     *config.Config // with defaults
	written *config.Config // as written
}

// prepare validates cfg against the running config: old with its
// defaults, written as it was written.
func (g *Gateway) prepare(old, written *config.Config, cfg config.Config) (*pending, error) {
	if err := cfg.Validate(); err != nil {
		return nil, &ReloadError{Field: fieldOf(err), Err: err}
	}
	raw := cfg
	cfg = cfg.WithDefaults()
	// A difference in effect is what refuses a reload (writing out a
	// default changes nothing); the field it names is the one written
	// differently when there is one — the limit an operator changed, not
	// the class timeout it caps.
	if field := restartField(old, &cfg); field != "" {
		if w := restartField(written, &raw); w != "" {
			field = w
		}
		return nil, &ReloadError{Field: field, RestartRequired: true,
			Err: fmt.Errorf("config: %s cannot change while the gateway runs: restart it to apply this config (nothing was changed)", field)}
	}
	return &pending{cfg: &cfg, written: &raw}, nil
}

// apply swaps the running policy for p's: the chain (tenants, retry
// budgets, the gate's waiting room and tenants) and the gate's slots under
// the concurrency controller's lock — the slots set the way the controller
// sets them, at the level it gives for the new ceiling, so that a level
// the provider's rate limits lowered is kept and no answer racing the
// reload moves the gate in between — then the spend policy. Every part was
// validated by prepare; the chain checks again before it changes
// anything, and only its refusal can fail a reload here.
func (g *Gateway) apply(p *pending) error {
	sc, err := p.cfg.SpendConfig()
	if err != nil {
		return err
	}
	ccfg, err := p.cfg.Chain(g.spend)
	if err != nil {
		return err
	}
	if ccfg.Routing != nil {
		// Several pools: restart-only (prepare refused a change); their
		// slots stay their controllers'; their waiting rooms and tenants
		// change.
		for i := range ccfg.Routing.Pools {
			ccfg.Routing.Pools[i].Admission.Concurrency = 0
		}
		if err := g.chain.Reconfigure(ccfg); err != nil {
			return fmt.Errorf("config: %w", err)
		}
		return g.reconfigureSpend(sc, p.cfg.Spend)
	}
	// The one pool of `upstream:`, whose concurrency may change: the
	// chain keeps the gate's slots (zero); they are the controller's to
	// set, at the level it gives for the new ceiling.
	ceiling := ccfg.Admission.Concurrency
	if l := p.cfg.Learning()[0]; l != nil {
		ceiling = l.Max // the learner's ceiling; its level stays its own
	}
	ccfg.Admission.Concurrency = 0
	pool := g.pools[0]
	err = pool.limit.rescale(time.Now(), ceiling, func(level int) error {
		if err := g.chain.Reconfigure(ccfg); err != nil {
			return fmt.Errorf("config: %w", err)
		}
		pool.set(level)
		return nil
	})
	if err != nil {
		return err
	}
	return g.reconfigureSpend(sc, p.cfg.Spend)
}

// reconfigureSpend gives the spend limiter its reloaded policy (none
// without a spend section).
func (g *Gateway) reconfigureSpend(sc, written *spend.Config) error {
	if sc != nil {
		if err := g.spend.Reconfigure(*sc); err != nil { // validated: cannot happen
			g.log.Error("the spend policy was not reloaded", "err", err)
		}
		g.metrics.dash.SetSpend(written) // a page loaded from now on draws the new ceiling and stages
	}
	return nil
}

// summary is what a reload's log line says: the sizes of the new policy
// and the tenants added and removed, by name, never a key.
func (p *pending) summary(old *config.Config) []any {
	was := map[string]bool{}
	for _, t := range old.Tenants {
		was[t.Name] = true
	}
	var added, removed []string
	for _, t := range p.cfg.Tenants {
		if !was[t.Name] {
			added = append(added, t.Name)
		}
		delete(was, t.Name)
	}
	for name := range was {
		removed = append(removed, name)
	}
	sort.Strings(removed)
	return []any{"tenants", len(p.cfg.Tenants), "tenants_added", added, "tenants_removed", removed,
		"concurrency", p.cfg.Admission.Concurrency, "max_queue", *p.cfg.Admission.MaxQueue, "spend", p.cfg.Spend != nil}
}

// rescale changes the controller's ceiling to the configured concurrency
// and gives apply the level to run at now: the ceiling, or, while the
// provider's rate limits hold it lower, the level they left it at (cut to
// the new ceiling), which climbs from there to the new ceiling. A refused
// apply leaves the controller as it was.
func (a *aimd) rescale(now time.Time, ceiling int, apply func(level int) error) error {
	if a.off && a.learn == nil {
		return apply(ceiling) // the controller never moves the gate
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.learn != nil {
		old := a.learn.Config().Max
		a.learn.SetMax(now, ceiling)
		if err := apply(a.learn.Limit()); err != nil {
			a.learn.SetMax(now, old)
			return err
		}
		a.ceiling, a.applied = ceiling, a.learn.Limit()
		return nil
	}
	oldCeiling, oldBase := a.ceiling, a.base
	a.ceiling, a.base = ceiling, min(a.base, ceiling)
	level := a.levelLocked(now)
	if err := apply(level); err != nil {
		a.ceiling, a.base = oldCeiling, oldBase
		return err
	}
	a.applied = level
	return nil
}

// restartField names the first field in which next differs from old
// outside what a reload changes, or returns "". Both have their defaults.
func restartField(old, next *config.Config) string {
	if old.Learns() != next.Learns() {
		// Learning the concurrency or being told it: a controller of
		// another kind, built at start.
		return "admission.concurrency"
	}
	m := *next
	// What a reload changes is taken from old: any difference left is in
	// what it does not.
	m.Tenants, m.Mode = old.Tenants, old.Mode
	m.Admission.Concurrency = old.Admission.Concurrency
	m.Admission.MaxQueue = old.Admission.MaxQueue
	m.Admission.MaxQueuePerTenant = old.Admission.MaxQueuePerTenant
	m.Retries.Budget, m.Retries.PerTenant = old.Retries.Budget, old.Retries.PerTenant
	if old.Spend != nil && next.Spend != nil {
		sp := *old.Spend
		// The alerter's webhook and timing are read when it starts.
		sp.AlertWebhook, sp.AlertInterval, sp.AlertTimeout = next.Spend.AlertWebhook, next.Spend.AlertInterval, next.Spend.AlertTimeout
		m.Spend = &sp
	}
	if d := firstDiff(reflect.ValueOf(*old), reflect.ValueOf(m), ""); d != "" {
		return d
	}
	// With upstreams the ladder under load is the routing's, built once:
	// taken from spend.ladder when degrade.ladder is empty, it does not
	// follow that reloadable field.
	if len(next.Upstreams) > 0 {
		ol, _ := old.DegradeLadder()
		nl, path := next.DegradeLadder()
		if !maps.Equal(ol, nl) {
			return path
		}
	}
	return ""
}

// firstDiff walks two values of one config type and returns the YAML path
// of the first difference, or "". A nil and an empty slice or map are
// equal: the YAML says the same.
func firstDiff(a, b reflect.Value, path string) string {
	join := func(name string) string {
		if path == "" {
			return name
		}
		return path + "." + name
	}
	switch a.Kind() {
	case reflect.Pointer:
		switch {
		case a.IsNil() && b.IsNil():
			return ""
		case a.IsNil() || b.IsNil():
			return path
		}
		return firstDiff(a.Elem(), b.Elem(), path)
	case reflect.Struct:
		t := a.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			if d := firstDiff(a.Field(i), b.Field(i), join(name)); d != "" {
				return d
			}
		}
		return ""
	case reflect.Map:
		keys := map[string]reflect.Value{}
		for _, k := range append(a.MapKeys(), b.MapKeys()...) {
			keys[fmt.Sprint(k.Interface())] = k
		}
		names := make([]string, 0, len(keys))
		for n := range keys {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			va, vb := a.MapIndex(keys[n]), b.MapIndex(keys[n])
			if !va.IsValid() || !vb.IsValid() {
				return join(n)
			}
			if d := firstDiff(va, vb, join(n)); d != "" {
				return d
			}
		}
		return ""
	case reflect.Slice:
		if a.Len() != b.Len() {
			return path
		}
		for i := range a.Len() {
			if d := firstDiff(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i)); d != "" {
				return d
			}
		}
		return ""
	}
	if !a.CanInterface() || reflect.DeepEqual(a.Interface(), b.Interface()) {
		return ""
	}
	return path
}

// fieldOf finds the field a config error names: the path after "config: "
// (and a "chain: " prefix), up to the first colon or space. It returns ""
// when the text names none (a file that cannot be read, a YAML syntax
// error).
func fieldOf(err error) string {
	msg := err.Error()
	for _, p := range []string{"config: ", "chain: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	end := strings.IndexAny(msg, ": ")
	if end <= 0 {
		return ""
	}
	field := msg[:end]
	for _, r := range field {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._[]-\"", r)) {
			return ""
		}
	}
	if field == "yaml" || field == "open" || field == "read" {
		return ""
	}
	return field
}

// ReloadState is the reloads' part of the state dump.
type ReloadState struct {
	// Source says the gateway has a config to re-read.
	Source bool `json:"source"`
	// OK and Errors count the reloads applied and refused.
	OK     uint64 `json:"ok"`
	Errors uint64 `json:"errors"`
	// Last is when the last reload was tried and LastError its error
	// (empty when it was applied); both absent before any.
	Last      *time.Time `json:"last,omitempty"`
	LastError string     `json:"last_error,omitempty"`
}

func (g *Gateway) reloadState() *ReloadState {
	r := g.reload
	s := &ReloadState{Source: r.source != nil, OK: r.ok.Load(), Errors: r.bad.Load()}
	if l := r.last.Load(); l != nil {
		at := l.at.UTC()
		s.Last, s.LastError = &at, l.err
	}
	return s
}

// serveReload is POST /admin/v1/reload: 200 with the reload's state when
// the config was applied; 422 with the error naming the field (param) when
// it was refused (code invalid_config, or restart_required); 409 when
// there is nothing to re-read. The body never holds a key.
func (g *Gateway) serveReload(w http.ResponseWriter, _ *http.Request) {
	err := g.Reload()
	if err == nil {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(g.reloadState())
		return
	}
	var re *ReloadError
	if !errors.As(err, &re) {
		re = &ReloadError{Err: err}
	}
	status, code := http.StatusUnprocessableEntity, "invalid_config"
	switch {
	case re.Unavailable:
		status, code = http.StatusConflict, "reload_unavailable"
	case re.RestartRequired:
		code = "restart_required"
	}
	body := contract.ErrorBody{Error: contract.ErrorDetail{Message: err.Error(), Type: contract.ErrorTypeInvalidRequest, Code: code}}
	if re.Field != "" {
		field := re.Field
		body.Error.Param = &field
	}
	wire.WriteJSONError(w, status, body)
}
