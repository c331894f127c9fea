package batchapi

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice/batch"
)

// A batch's steps of the API's own, between the executor's items: a
// validating batch's file is checked line by line (then it is started, or
// failed with every bad line listed), and a batch whose items have all
// ended has its output and error files written (finalizing, or cancelling,
// then its final status). They run in one loop, woken by a new batch, a
// cancel or a result written, and every settlePoll for the batches another
// replica created or a crash left midway (the store lists them: Pending).

// settlePoll is how often the loop looks for pending batches when nothing
// wakes it.
const settlePoll = time.Second

// Hooks let a caller watch a batch between its steps. Each is called in
// the step's goroutine, which waits for it to return: a test that blocks
// in one holds the batch in its status for as long as it needs to observe
// it. Nil fields mean no hook.
type Hooks struct {
	// BeforeStep is called before the API validates a batch (b.Status
	// validating) or finalizes it (finalizing, or cancelling with nothing
	// left to run).
	BeforeStep func(b batch.Batch)
	// BeforeItem is called before an item runs.
	BeforeItem func(c batch.Claim)
}

// SetHooks sets the hooks; safe to call while the API runs.
func (a *API) SetHooks(h Hooks) { a.hooks.Store(&h) }

func (a *API) hook() Hooks {
	if h := a.hooks.Load(); h != nil {
		return *h
	}
	return Hooks{}
}

// kickSettle wakes the settle loop.
func (a *API) kickSettle() {
	select {
	case a.settleKick <- struct{}{}:
	default:
	}
}

// runSettle runs the steps until ctx ends.
func (a *API) runSettle(ctx context.Context) {
	tick := time.NewTicker(settlePoll)
	defer tick.Stop()
	for {
		a.settle(ctx)
		select {
		case <-ctx.Done():
			return
		case <-a.settleKick:
		case <-tick.C:
		}
	}
}

// settle takes every pending batch one step.
func (a *API) settle(ctx context.Context) {
	list, err := a.store.Pending(ctx)
	if err != nil {
		if ctx.Err() == nil {
			a.deps.Log.Error("batch: listing pending batches failed", "err", err)
		}
		return
	}
	for _, b := range list {
		if ctx.Err() != nil {
			return
		}
		if h := a.hook().BeforeStep; h != nil {
			h(b)
		}
		if b.Status == batch.StatusValidating {
			err = a.validate(ctx, b)
		} else {
			_, err = a.store.Finalize(ctx, b.Tenant, b.ID, a.now())
		}
		// A conflict is a batch another replica (or a cancel) moved on.
		if err != nil && !errors.Is(err, batch.ErrConflict) && !errors.Is(err, batch.ErrNotFound) && ctx.Err() == nil {
			a.deps.Log.Error("batch: a batch's step failed", "batch", b.ID, "status", b.Status, "err", err)
		}
	}
}

// validate checks a validating batch's file line by line and starts the
// batch, or fails it with every bad line (up to batch.MaxLineErrors).
func (a *API) validate(ctx context.Context, b batch.Batch) error {
	var errs []batch.LineError
	content, err := a.store.FileContent(ctx, b.Tenant, b.InputFileID)
	f, ferr := a.store.File(ctx, b.Tenant, b.InputFileID)
	switch {
	case errors.Is(err, batch.ErrNotFound) || errors.Is(ferr, batch.ErrNotFound) || err == nil && f.Expired(a.now()):
		errs = []batch.LineError{{Code: "file_not_found", Param: "input_file_id", Message: "the input file " + b.InputFileID + " is gone (deleted or expired)"}}
	case err != nil:
		return err
	case ferr != nil:
		return ferr
	}
	var reqs []batch.Request
	var model string
	if errs == nil {
		reqs, model, errs = batch.Validate(content, a.cfg.MaxRequests, b.Endpoint, a.deps.ReadBody)
	}
	if len(errs) > 0 {
		return a.store.Fail(ctx, b.Tenant, b.ID, errs, a.now())
	}
	if err := a.store.Start(ctx, b.Tenant, b.ID, model, reqs, a.now()); err != nil {
		return err
	}
	a.exec.Notify()
	return nil
}
