package batchapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/batch"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/gateway/wire"
	"github.com/sluicehq/sluice/store"
)

// Deps is what the API takes from the gateway that serves it. Handler,
// Stats and ReadBody are required; every other field says what its zero
// value means.
type Deps struct {
	// Store keeps the files, the batches and their items. The API owns
	// it: Run closes it on return, Close if Run is never called, New if it
	// fails. Nil means the bbolt file at Config.Path, which New opens.
	Store batch.JobStore
	// Owner names this replica's claims on items in a store the replicas
	// share (store.redis): a claim then lapses after MaxTimeout and
	// leaseMargin, for another replica to take over the items of one that
	// died. Empty means the store is this process's own.
	Owner string

	// Handler returns the handler that runs an item of tenant's, a POST
	// to path, as a live call of the tenant's: through the same chain at
	// Config.Class, to the same upstream, on the same books. It returns
	// ErrUnknownTenant when the tenant is no longer configured, and
	// ErrNotGated when path is not an API the gateway gates.
	Handler func(tenant, path string) (http.Handler, error)
	// Stats is the gateway's admission state, all pools together: its
	// slots bound the items running, its service rate is the estimate of
	// a backlog before items have ended, its depth at Rank is Waiting.
	Stats func() admission.Stats
	// Rank is the rank of Config.Class in the gate.
	Rank int
	// ReadBody reads an item's body as the gateway reads a live call's:
	// the model it names and whether it streams; an error is why the
	// gateway would refuse it. An upload with such a body is refused.
	ReadBody batch.ReadBody
	// CheckModel checks a batch's model as a live call of the tenant's to
	// path at Config.Class would be checked — known, priced when the spend
	// policy rejects unknown models, the class allowed — and returns the
	// fault's code and message, or an empty code. Nil means no check.
	CheckModel func(tenant, path, model string) (code, msg string)
	// MaxBodyBytes bounds a line's body as a live call's body is bounded
	// (limits.max_body_bytes). Zero means batch.DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Draining says whether the gateway is shutting down: items are put
	// back rather than run. Nil means never.
	Draining func() bool
	// MaxTimeout bounds an item's call (limits.max_timeout), and so a
	// claim's lease in a shared store. Zero means the item's deadline
	// alone bounds it.
	MaxTimeout time.Duration
	// Grace is how long Run lets running items finish once its context
	// ends (shutdown_grace). Zero means they are cancelled at once.
	Grace time.Duration

	// WriteError writes the API's error answers (the gateway's writer
	// notes the code for its access log). Nil means the body as JSON.
	WriteError func(w http.ResponseWriter, status int, body contract.ErrorBody)
	// BadInput counts a request refused for what it asked, by code (the
	// gateway's sluice_bad_requests_total). Nil means not counted.
	BadInput func(code string)
	// Log receives the store's failures. Nil means slog.Default().
	Log *slog.Logger
}

// Errors of Deps.Handler, which the API answers for the item (403, 404)
// rather than run it.
var (
	ErrUnknownTenant = errors.New("batchapi: the batch's tenant is no longer configured")
	ErrNotGated      = errors.New("batchapi: not a batch endpoint")
)

// API is the Batch API (OpenAI's /v1/files and /v1/batches) of one
// gateway, and the executor of its items. Safe for concurrent use.
type API struct {
	cfg   Config
	deps  Deps
	store batch.JobStore
	exec  *batch.Executor
	now   func() time.Time
	close sync.Once
	err   error // of the store's Close

	uploads    *uploads // the uploads being read (uploads.go)
	hooks      atomic.Pointer[Hooks]
	settleKick chan struct{} // wakes the settle loop (settle.go)
}

var _ batch.Doer = (*API)(nil)

// leaseMargin is the time past Deps.MaxTimeout a replica's claim on an
// item lasts in the shared store: for the answer to be written.
const leaseMargin = 5 * time.Second

// New returns the API for cfg (with its defaults), opening the bbolt
// store at cfg.Path unless deps.Store is set. A store another process
// holds is an error that matches batch.ErrLocked.
func New(cfg Config, deps Deps) (*API, error) {
	cfg = cfg.WithDefaults()
	err := cfg.Validate()
	if err == nil && (deps.Handler == nil || deps.Stats == nil || deps.ReadBody == nil) {
		err = errors.New("batchapi: Deps.Handler, Deps.Stats and Deps.ReadBody are required")
	}
	if err != nil {
		if deps.Store != nil {
			deps.Store.Close()
		}
		return nil, err
	}
	if deps.Draining == nil {
		deps.Draining = func() bool { return false }
	}
	if deps.WriteError == nil {
		deps.WriteError = wire.WriteJSONError
	}
	if deps.BadInput == nil {
		deps.BadInput = func(string) {}
	}
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	js := deps.Store
	if js == nil {
		bs, err := batch.OpenBolt(cfg.Path, 500*time.Millisecond)
		if err != nil {
			if errors.Is(err, batch.ErrLocked) {
				return nil, fmt.Errorf("config: batch.path: %w (another sluice holds it; give each its own batch.path)", err)
			}
			return nil, fmt.Errorf("config: batch.path: %w", err)
		}
		js = bs
	}
	var lease time.Duration
	if deps.Owner != "" {
		// An item's call ends by limits.max_timeout: a claim older than
		// that and the time to write its result is a replica's that died,
		// and another takes it over.
		lease = deps.MaxTimeout + leaseMargin
	}
	a := &API{cfg: cfg, deps: deps, store: js, now: time.Now, settleKick: make(chan struct{}, 1),
		uploads: newUploads(cfg.MaxUploads, cfg.MaxTenantUploads)}
	// Claimed items are what a crash runs again: no more than the slots
	// and the waiting places, counting those whose answer is being
	// written — the slots as they are now, moved by a reload or the
	// cluster's lease.
	a.exec = batch.NewExecutor(batch.ExecutorConfig{Store: js, Doer: a, Owner: deps.Owner, Lease: lease, MaxWaiting: cfg.MaxWaiting,
		MaxRunningFunc: func() int { return deps.Stats().Concurrency + cfg.MaxWaiting },
		Grace:          deps.Grace, Log: deps.Log, OnResult: a.kickSettle})
	return a, nil
}

// Run runs the batches' items and steps (settle.go) until ctx ends, lets
// the running items finish for Deps.Grace, then closes the store and
// returns what closing it returned. Call it once.
func (a *API) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { a.runSettle(ctx) })
	a.exec.Run(ctx)
	wg.Wait()
	return a.Close()
}

// Close closes the store, once: for an API whose Run is never called.
// Items are not run after it.
func (a *API) Close() error {
	a.close.Do(func() { a.err = a.store.Close() })
	return a.err
}

// Waiting is the items (with speculative work) waiting in the gate at the
// batch class's rank.
func (a *API) Waiting() int {
	st := a.deps.Stats()
	if a.deps.Rank < len(st.Depth) {
		return st.Depth[a.deps.Rank]
	}
	return 0
}

// Serve answers r, a request of tenant's (the gateway has authenticated
// the caller) to /v1/files… or /v1/batches…. It returns false, having
// written nothing, when r's path is none of the API's: the gateway
// answers it as any path it does not serve.
func (a *API) Serve(w http.ResponseWriter, r *http.Request, tenant string) bool {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/") // v1, files|batches, id?, sub?
	method := r.Method
	switch {
	case len(parts) == 2 && parts[1] == "files" && method == http.MethodPost:
		a.uploadFile(w, r, tenant)
	case len(parts) == 2 && parts[1] == "files" && method == http.MethodGet:
		a.listFiles(w, r, tenant)
	case len(parts) == 3 && parts[1] == "files" && method == http.MethodGet:
		a.getFile(w, r, tenant, parts[2])
	case len(parts) == 3 && parts[1] == "files" && method == http.MethodDelete:
		a.deleteFile(w, r, tenant, parts[2])
	case len(parts) == 4 && parts[1] == "files" && parts[3] == "content" && method == http.MethodGet:
		a.fileContent(w, r, tenant, parts[2])
	case len(parts) == 2 && parts[1] == "batches" && method == http.MethodPost:
		a.createBatch(w, r, tenant)
	case len(parts) == 2 && parts[1] == "batches" && method == http.MethodGet:
		a.listBatches(w, r, tenant)
	case len(parts) == 3 && parts[1] == "batches" && method == http.MethodGet:
		a.getBatch(w, r, tenant, parts[2])
	case len(parts) == 4 && parts[1] == "batches" && parts[3] == "cancel" && method == http.MethodPost:
		a.cancel(w, r, tenant, parts[2])
	case len(parts) == 2:
		a.methodNotAllowed(w)
	case len(parts) <= 4:
		// Not served (deleting a batch, for one): said only of the
		// tenant's own ids, which tells nothing of others'.
		switch err := a.owns(r.Context(), tenant, parts[1], parts[2]); {
		case err == nil:
			a.methodNotAllowed(w)
		case errors.Is(err, store.ErrUnavailable): // cannot tell which
			a.failed(w, err)
		default:
			return false
		}
	default:
		return false
	}
	return true
}

func (a *API) methodNotAllowed(w http.ResponseWriter) {
	a.deps.BadInput("method_not_allowed")
	a.writeError(w, http.StatusMethodNotAllowed, contract.ErrorTypeInvalidRequest, "method_not_allowed",
		"method not allowed on this path (sluice's Batch API serves files.create, files.list, files.retrieve, files.delete, files.content, batches.create, batches.retrieve, batches.list and batches.cancel)")
}

// owns returns nil when the tenant has the file or batch id, else why not:
// batch.ErrNotFound, or the store's failure.
func (a *API) owns(ctx context.Context, tenant, kind, id string) error {
	if !validID(id) {
		return batch.ErrNotFound
	}
	var err error
	if kind == "files" {
		_, err = a.store.File(ctx, tenant, id)
	} else {
		_, err = a.store.Batch(ctx, tenant, id)
	}
	return err
}

// invalid refuses a request for what it asked: a 4xx that the same
// request would get again, so it says x-should-retry: false (the OpenAI
// SDKs would otherwise retry a 409).
func (a *API) invalid(w http.ResponseWriter, status int, code, param, msg string) {
	a.deps.BadInput(code)
	w.Header().Set(headerShouldRetry, "false")
	var p *string
	if param != "" {
		p = &param
	}
	a.deps.WriteError(w, status, contract.ErrorBody{Error: contract.ErrorDetail{Message: msg, Type: contract.ErrorTypeInvalidRequest, Param: p, Code: code}})
}

// bodyError answers a body that could not be read whole (wire.BodyError),
// its cause in the log with the request id. A stalled body may get through
// a second time, so only that one leaves the SDKs' own retry rule alone.
func (a *API) bodyError(w http.ResponseWriter, br *wire.BadRequest) {
	a.logCause(w, br.Code, br.Cause)
	if br.Code == wire.CodeBodyStalled {
		a.deps.BadInput(br.Code)
		a.deps.WriteError(w, br.Status, contract.ErrorBody{Error: contract.ErrorDetail{Message: br.Msg, Type: contract.ErrorTypeInvalidRequest, Code: br.Code}})
		return
	}
	a.invalid(w, br.Status, br.Code, "", br.Msg)
}

// logCause logs the error behind a refusal, which its body does not
// carry, with the request's id.
func (a *API) logCause(w http.ResponseWriter, code string, err error) {
	if err != nil {
		a.deps.Log.Info("bad request", "code", code, "request_id", w.Header().Get(contract.HeaderRequestID), "err", err)
	}
}

// headerShouldRetry is the header the OpenAI SDKs read before their own
// rule (retry 408, 409, 429, 5xx): "false" means the answer would not
// change.
const headerShouldRetry = "X-Should-Retry"

func (a *API) notFound(w http.ResponseWriter, what, id string) {
	a.invalid(w, http.StatusNotFound, "not_found", "", fmt.Sprintf("no %s with id %q", what, contract.Echo(id)))
}

// CodeStoreUnavailable is the error code and X-Sluice-Reason of a call
// refused because the store (Redis) does not answer: a 503 with
// Retry-After. It is not one of the contract's admission reasons
// (contract.Reasons), a closed list that programs branch on: nothing was
// shed for load. As the connection guard's refusals (max_connections), it
// says why in the same header, outside that list.
const CodeStoreUnavailable = "store_unavailable"

// failed answers a call the store failed: 503 store_unavailable when the
// store could not be reached (store.ErrUnavailable), which the same call
// gets past once Redis is back; 500 batch_store_error, logged, for any
// other failure (data that does not parse, a script's error), which
// waiting does not cure.
func (a *API) failed(w http.ResponseWriter, err error) {
	if errors.Is(err, store.ErrUnavailable) {
		// Not logged: the breaker logs Redis going and coming back once,
		// where a line per refused call would flood the log.
		a.storeUnavailable(w, err)
		return
	}
	a.deps.Log.Error("batch store failed", "err", err)
	a.writeError(w, http.StatusInternalServerError, "server_error", "batch_store_error", "the batch store failed; try again")
}

// storeUnavailable answers a call the store could not serve because Redis
// does not answer: 503, since when it has not, and a Retry-After for the
// breaker's next probe — sooner would be refused without trying Redis —
// or a second when the breaker lets calls through already (it is closed,
// or another call is probing).
func (a *API) storeUnavailable(w http.ResponseWriter, err error) {
	now := a.now()
	retry, since := time.Second, now
	var ue *store.UnavailableError
	if errors.As(err, &ue) {
		if ue.RetryAt.After(now) {
			retry = ue.RetryAt.Sub(now)
		}
		if !ue.Since.IsZero() {
			since = ue.Since
		}
	}
	retryMs := contract.RetryAfterMs(retry)
	h := w.Header()
	h.Set(contract.HeaderRetryAfter, strconv.FormatInt(contract.RetryAfterSeconds(retry), 10))
	h.Set(contract.HeaderRetryAfterMs, strconv.FormatInt(retryMs, 10))
	h.Set(contract.HeaderReason, CodeStoreUnavailable)
	a.deps.WriteError(w, http.StatusServiceUnavailable, contract.ErrorBody{Error: contract.ErrorDetail{
		Message: fmt.Sprintf("the batch store (Redis) has been unreachable since %s (for %v); retry after %d ms",
			since.UTC().Format(time.RFC3339), now.Sub(since).Round(time.Millisecond), retryMs),
		Type: contract.ErrorTypeOverloaded, Code: CodeStoreUnavailable, RetryAfterMs: &retryMs}})
}

func (a *API) writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	a.deps.WriteError(w, status, contract.ErrorBody{Error: contract.ErrorDetail{Message: msg, Type: typ, Code: code}})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// validID bounds an id from a path before it reaches the store.
func validID(id string) bool {
	return id != "" && len(id) <= 128 && !strings.ContainsAny(id, "\x00/")
}
