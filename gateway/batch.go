package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/batch"
	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/gateway/batchapi"
	"github.com/sluicehq/sluice/store"
)

// The Batch API (OpenAI's /v1/files and /v1/batches) is package batchapi;
// here is what of it reads the rest of the gateway: whether it is on (the
// store and passthrough sections), the class it adds, its store with
// store.redis, and what it takes of the gateway (batchapi.Deps).

// BatchConfig is the batch section's type.
type BatchConfig = batchapi.Config

// DefaultBatchPath is where `sluice serve` keeps batches when batch.path
// is unset (batchapi.DefaultPath).
func DefaultBatchPath() (string, error) { return batchapi.DefaultPath() }

// IsBatchStoreInUse says whether New failed because another process holds
// batch.path.
func IsBatchStoreInUse(err error) bool { return errors.Is(err, batch.ErrLocked) }

// batchOn says whether the Batch API is on: batch.path is set, or
// store.redis is (which then keeps the batches) and passthrough does not
// forward the Batch API's paths; and batch.disabled is not.
func (c Config) batchOn() bool {
	return !c.Batch.Disabled && (c.Batch.Path != "" || c.Store != nil && c.Store.Redis != nil && !c.PassesBatchThrough())
}

// batchClassDefaults adds the batch class to classes, and to every
// tenant restricted to some classes, when the Batch API is on. It copies
// what it changes: c shares its maps and slices with the caller's.
func (c Config) batchClassDefaults() Config {
	if !c.batchOn() {
		return c
	}
	class := c.Batch.Class
	if _, ok := c.Classes[class]; !ok {
		classes := make(map[string]ClassConfig, len(c.Classes)+1)
		for k, v := range c.Classes {
			classes[k] = v
		}
		classes[class] = ClassConfig{Rank: c.Batch.Rank}
		c.Classes = classes
	}
	if slices.ContainsFunc(c.Tenants, func(t chain.TenantConfig) bool { return len(t.Classes) > 0 && !slices.Contains(t.Classes, class) }) {
		tenants := slices.Clone(c.Tenants)
		for i := range tenants {
			if len(tenants[i].Classes) > 0 && !slices.Contains(tenants[i].Classes, class) {
				tenants[i].Classes = append(slices.Clone(tenants[i].Classes), class)
			}
		}
		c.Tenants = tenants
	}
	return c
}

// validateBatch checks the batch section when the Batch API is on, and
// that passthrough does not forward the paths it serves.
func (c Config) validateBatch() error {
	if !c.batchOn() {
		return nil
	}
	if err := c.Batch.Validate(); err != nil {
		return err
	}
	if i, path := c.batchPassthrough(); i >= 0 {
		return fmt.Errorf("config: passthrough[%d].path: %q covers %s, which the gateway's Batch API serves (set batch.disabled to forward it instead)", i, c.Passthrough[i].Path, path)
	}
	return nil
}

// batchPassthrough returns the first passthrough entry that forwards a
// Batch API path, and the path; -1 when none does. A broader prefix
// ("/v1/") does not count: the Batch API's routes are longer, and win.
func (c Config) batchPassthrough() (int, string) {
	for i, p := range c.Passthrough {
		for _, rt := range batchRoutes {
			if path := strings.TrimSuffix(rt.path, "/"); strings.HasPrefix(p.Path, path) {
				return i, path
			}
		}
	}
	return -1, ""
}

// PassesBatchThrough says whether passthrough forwards /v1/files or
// /v1/batches to the provider: `sluice serve` then leaves the Batch API
// off unless batch.path is set.
func (c Config) PassesBatchThrough() bool {
	i, _ := c.batchPassthrough()
	return i >= 0
}

// openBatch opens the Batch API when it is on; nil when it is off. With
// store.redis the batches live in Redis, shared by the replicas (each
// claims items as a consumer named by its replica id); otherwise
// batchapi.New opens the bbolt file at batch.path.
func (g *Gateway) openBatch(getenv func(string) string) (*batchapi.API, error) {
	if !g.cfg.batchOn() {
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
		Draining:   g.draining.Load,
		MaxTimeout: g.cfg.Limits.MaxTimeout.D(),
		Grace:      g.cfg.ShutdownGrace.D(),
		WriteError: writeJSONError,
		BadInput:   func(code string) { g.metrics.badInput.WithLabelValues(code).Inc() },
		Log:        g.log,
	}
	if sc := g.cfg.Store; sc != nil && sc.Redis != nil {
		opened := g.books.redis != nil
		if err := g.openRedis(sc.Redis, getenv); err != nil {
			return nil, err
		}
		if !opened { // neither the books nor the lease opened it: its metrics are not registered yet
			g.metrics.reg.MustRegister(g.books.redis.Collector())
		}
		deps.Store = store.NewJobs(g.books.redis, store.JobsOptions{})
		deps.Owner = replicaID()
		if g.books.cluster != nil {
			deps.Owner = g.books.cluster.id
		}
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

// serveBatchAPI answers /v1/files… and /v1/batches… for the tenant.
func (g *Gateway) serveBatchAPI(w http.ResponseWriter, r *http.Request, tenant string) {
	if g.batch == nil {
		g.metrics.badInput.WithLabelValues("not_found").Inc()
		writeError(w, http.StatusNotFound, contract.ErrorTypeInvalidRequest, "not_found",
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
