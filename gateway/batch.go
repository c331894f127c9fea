package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/batch"
	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/gateway/batchapi"
	"github.com/sluicehq/sluice/gateway/wire"
	"github.com/sluicehq/sluice/store"
)

// The Batch API (OpenAI's /v1/files and /v1/batches) is package batchapi;
// here is what of it reads the rest of the gateway: whether it is on (the
// store and passthrough sections), the class it adds, its store with
// store.redis, and what it takes of the gateway (batchapi.Deps).

// DefaultBatchPath is where `sluice serve` keeps batches when batch.path
// is unset (batchapi.DefaultPath).
func DefaultBatchPath() (string, error) { return batchapi.DefaultPath() }

// IsBatchStoreInUse says whether New failed because another process holds
// batch.path.
func IsBatchStoreInUse(err error) bool { return errors.Is(err, batch.ErrLocked) }

// openBatch opens the Batch API when it is on; nil when it is off. With
// store.redis the batches live in Redis, shared by the replicas (each
// claims items as a consumer named by its replica id); otherwise
// batchapi.New opens the bbolt file at batch.path.
func (g *Gateway) openBatch() (*batchapi.API, error) {
	if !g.cfg.BatchOn() {
		return nil, nil
	}
	cfg := g.cfg.Batch
	rank, err := g.chain.Rank(admission.Request{Class: cfg.Class})
	if err != nil { // the class was added to classes: cannot happen
		return nil, fmt.Errorf("config: batch.class: %w", err)
	}
	deps := batchapi.Deps{
		Handler: g.batchItem(cfg.Class),
		Stats:   g.stats,
		Rank:    rank,
		ReadBody: func(raw []byte) (string, bool, error) {
			b, err := decodeBody(raw)
			return b.model, b.stream, err
		},
		CheckModel:   g.batchModel(cfg.Class),
		MaxBodyBytes: g.cfg.Limits.MaxBodyBytes,
		Draining:     g.draining.Load,
		MaxTimeout:   g.cfg.Limits.MaxTimeout.D(),
		Grace:        g.cfg.ShutdownGrace.D(),
		WriteError:   wire.WriteJSONError,
		BadInput:     func(code string) { g.metrics.badInput.WithLabelValues(code).Inc() },
		Log:          g.log,
	}
	if r, err := g.books.Redis(); err != nil { // with store.redis (package cluster)
		return nil, err
	} else if r != nil {
		deps.Store = store.NewJobs(r, store.JobsOptions{Retention: cfg.WithDefaults().Retention.D()})
		deps.Owner = g.books.Owner() // the lease's replica id, or one of its own
	}
	b, err := batchapi.New(cfg, deps)
	if err != nil {
		return nil, err
	}
	g.metrics.reg.MustRegister(b.Collector())
	return b, nil
}

// batchItem is the Batch API's Deps.Handler: an item runs as a call of
// its tenant's (at the tenant's tier) on its gated route, at the batch
// class whatever the route's.
func (g *Gateway) batchItem(class string) func(tenant, path string) (http.Handler, error) {
	return func(tenant, path string) (http.Handler, error) {
		info, ok := g.tenantInfo(tenant)
		if !ok {
			return nil, batchapi.ErrUnknownTenant
		}
		gated := g.routes.exact[path]
		if gated == nil || !gated.gated {
			return nil, batchapi.ErrNotGated
		}
		rt := *gated
		rt.class = class
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			g.serveCall(w, r, &rt, tenant, info.Tier)
		}), nil
	}
}

// batchModel is the Batch API's Deps.CheckModel: a batch's model checked
// as a live call of its tenant's to path at the batch class would be, by
// the chain's estimate (which takes nothing) — a model no pool serves, a
// model without a price when spend.unknown_model is reject, a class the
// tenant may not use — in the codes a live call gets.
func (g *Gateway) batchModel(class string) func(tenant, path, model string) (string, string) {
	return func(tenant, path, model string) (string, string) {
		info, ok := g.tenantInfo(tenant)
		if !ok {
			return "", "" // the item's run answers for a tenant gone
		}
		rt := g.routes.exact[path]
		req := chain.Request{Tenant: tenant, Tier: info.Tier, Class: class, Model: model, Deadline: time.Now().Add(time.Hour),
			Unpriced: rt == nil || !rt.billed, Flavour: config.FlavourOpenAI}
		if _, err := g.chain.Estimate(req); err != nil {
			if br := chainBadInput(err, tenant, model, "batch.class"); br != nil {
				return br.Code, br.Msg
			}
		}
		return "", ""
	}
}

// serveBatchAPI answers /v1/files… and /v1/batches… for the tenant.
func (g *Gateway) serveBatchAPI(w http.ResponseWriter, r *http.Request, tenant string) {
	if g.batch == nil {
		g.metrics.badInput.WithLabelValues("not_found").Inc()
		wire.WriteError(w, http.StatusNotFound, contract.ErrorTypeInvalidRequest, "not_found",
			"the Batch API is off: set batch.path or store.redis in the config (sluice serve keeps it under the state directory unless batch.disabled is set)")
		return
	}
	if !g.batch.Serve(w, r, tenant) {
		g.notFound(w, r)
	}
}

// RunBatch runs the batches' items until ctx ends, lets the running ones
// finish for shutdown_grace, then closes the store. Server.Serve runs it;
// a program that mounts the Gateway itself should too. Without the Batch
// API it returns at once. Call it once.
func (g *Gateway) RunBatch(ctx context.Context) error {
	if g.batch == nil {
		return nil
	}
	return g.batch.Run(ctx)
}

// maxBodyBytes is the most r's route takes of a body, for the body's read
// deadline (guard.Middleware): an upload to the Batch API's files, its
// file and form; any other request, limits.max_body_bytes.
func (g *Gateway) maxBodyBytes(r *http.Request) int64 {
	if g.batch != nil && r.Method == http.MethodPost && r.URL.Path == "/v1/files" {
		return g.batch.MaxUploadBytes()
	}
	return g.cfg.Limits.MaxBodyBytes
}
