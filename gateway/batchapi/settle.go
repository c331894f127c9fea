package batchapi

import (
	"context"
	"errors"
	"io"
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

// purgeEvery is how often the settle loop deletes what has passed its
// time (files past expires_at, batches past batch.retention).
const purgeEvery = time.Minute

// runSettle runs the steps until ctx ends, and the purge every purgeEvery.
func (a *API) runSettle(ctx context.Context) {
	tick := time.NewTicker(settlePoll)
	defer tick.Stop()
	var purged time.Time
	for {
		a.settle(ctx)
		if now := a.now(); now.Sub(purged) >= purgeEvery {
			purged = now
			a.purge(ctx, now)
		}
		select {
		case <-ctx.Done():
			return
		case <-a.settleKick:
		case <-tick.C:
		}
	}
}

// purge deletes the files past their expiry and the batches past the
// retention, and logs what it deleted.
func (a *API) purge(ctx context.Context, now time.Time) {
	n, err := a.store.Purge(ctx, now, a.cfg.Retention.D())
	switch {
	case err != nil && ctx.Err() == nil:
		a.deps.Log.Error("batch: purging expired files and batches failed", "err", err)
	case n > 0:
		a.deps.Log.Info("batch: purged expired files and batches", "deleted", n)
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

// validate checks a validating batch's file line by line, read a chunk
// at a time, and starts the batch — reading the file a second time for
// the requests, which Start writes a chunk at a time — or fails it with
// every bad line (up to batch.MaxLineErrors). No step holds the file
// whole.
func (a *API) validate(ctx context.Context, b batch.Batch) error {
	gone := []batch.LineError{{Code: "file_not_found", Param: "input_file_id", Message: "the input file " + b.InputFileID + " is gone (deleted or expired)"}}
	open := func() (io.ReadCloser, error) {
		f, err := a.store.File(ctx, b.Tenant, b.InputFileID)
		if err == nil && f.Expired(a.now()) {
			err = batch.ErrNotFound
		}
		if err != nil {
			return nil, err
		}
		return a.store.FileContent(ctx, b.Tenant, b.InputFileID)
	}
	content, err := open()
	if errors.Is(err, batch.ErrNotFound) {
		return a.store.Fail(ctx, b.Tenant, b.ID, gone, a.now())
	} else if err != nil {
		return err
	}
	check := batch.Check{MaxLines: a.cfg.MaxRequests, MaxBodyBytes: a.deps.MaxBodyBytes, Endpoint: b.Endpoint, ReadBody: a.deps.ReadBody}
	if a.deps.CheckModel != nil {
		check.Model = func(model string) (string, string) { return a.deps.CheckModel(b.Tenant, b.Endpoint, model) }
	}
	model, _, errs, err := batch.Validate(content, check)
	content.Close()
	if errors.Is(err, batch.ErrNotFound) { // deleted while it was read
		errs, err = gone, nil
	}
	if err != nil {
		return err
	}
	if len(errs) > 0 {
		return a.store.Fail(ctx, b.Tenant, b.ID, errs, a.now())
	}
	if content, err = open(); errors.Is(err, batch.ErrNotFound) {
		return a.store.Fail(ctx, b.Tenant, b.ID, gone, a.now())
	} else if err != nil {
		return err
	}
	defer content.Close()
	err = a.store.Start(ctx, b.Tenant, b.ID, model, batch.Requests(content, a.deps.MaxBodyBytes), a.now())
	if errors.Is(err, batch.ErrNotFound) {
		if _, ferr := a.store.File(ctx, b.Tenant, b.InputFileID); errors.Is(ferr, batch.ErrNotFound) {
			return a.store.Fail(ctx, b.Tenant, b.ID, gone, a.now())
		}
	}
	if err != nil {
		return err
	}
	a.exec.Notify()
	return nil
}
