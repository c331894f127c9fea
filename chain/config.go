package chain

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/spend"
)

// Config configures a chain.
type Config struct {
	// Admission configures the gate.
	Admission admission.Config
	// Tenants are the configured tenants. With none, every call is the
	// anonymous tenant's unless the shell names one.
	Tenants []TenantConfig
	// Retries configures the retry budgets stage and, in its Recognise,
	// the stage that recognises retries sent without a header, before the
	// retry budgets charge them.
	Retries RetryConfig
	// Spend is the spend limiter. Nil leaves the spend stage out: no
	// books, no budgets. The shell builds it, since where its books live
	// (spend.Options.Ledger) is the shell's choice, and keeps it to read
	// its state and run its alerts.
	Spend *spend.Limiter
	// RefusalSpread is how far past its base recovery the Retry-After of
	// callers refused together is spread, so that their retries come back
	// at the rate they can be admitted (see spread.go). Zero means
	// DefaultRefusalSpread (30s); negative turns the spread off: every
	// caller refused together is told the same time.
	RefusalSpread time.Duration
	// Routing spreads calls over pools of their own, one per (deployment,
	// model), each with its own gate built from its PoolConfig.Admission
	// (Admission is then unused). Nil means one pool, DefaultPool: the gate
	// of Admission, for every model.
	Routing *RoutingConfig
	// Mode is the chain's mode, and its tenants' unless they name their
	// own: ModeEnforce or ModeObserve (see ModeObserve). Empty means
	// enforce.
	Mode string
}

// stages are a chain's stages before the gate.
type stages struct {
	identify *identify
	seen     *seen
	retries  *retries
	degrade  *degrader // nil without a ladder
	spend    *spendStage
	route    *router
	all      []Stage // list(), computed once
	spread   *spread // the retry calendar of every refusal, the gate's included
}

// newStages builds the stages before the gate; rt is the route stage, whose
// view of the pools' gates the other stages get.
func newStages(cfg Config, rt *router) (*stages, error) {
	gate := rt.gateView
	id, err := newIdentify(cfg.Tenants, cfg.Mode, gate)
	if err != nil {
		return nil, err
	}
	s := &stages{identify: id, spread: newSpread(cfg.RefusalSpread)}
	if s.seen, err = newSeen(cfg.Retries.Recognise); err != nil {
		return nil, fmt.Errorf("recognise: %w", err)
	}
	if s.retries, err = newRetries(cfg.Retries); err != nil {
		return nil, fmt.Errorf("retries: %w", err)
	}
	if cfg.Spend != nil {
		s.spend = &spendStage{l: cfg.Spend, gate: gate}
	}
	if len(rt.ladder) > 0 {
		s.degrade = &degrader{rt: rt}
	}
	s.route = rt
	s.all = s.list()
	if len(s.all) > maxStages {
		return nil, fmt.Errorf("chain: %d stages, at most %d", len(s.all), maxStages)
	}
	return s, nil
}

// admit asks every stage about r in order. A refusal comes back as a
// Rejected decision, anything else that went wrong as an error; either
// way, nothing stays taken.
func (s *stages) admit(now time.Time, r *Request, hs *holds) (Decision, error) {
	err := hs.admit(s.all, now, r)
	if err == nil {
		return Decision{}, nil
	}
	var rej *admission.Rejection
	if errors.As(err, &rej) {
		return Decision{Verdict: admission.Rejected, Rejection: rej}, nil
	}
	return Decision{}, err
}

func (s *stages) retriesRecognised() uint64 {
	if s.seen == nil {
		return 0
	}
	return s.seen.recognised.Load()
}
