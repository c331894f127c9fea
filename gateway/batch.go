package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/batch"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/store"
)

// The Batch API (OpenAI's /v1/files and /v1/batches), served by the
// gateway itself: files and batches are the tenant's own, kept in a
// batch.JobStore on local disk (or in Redis, shared by the replicas, with
// store.redis), and each item runs through the same chain
// as a live call at a class ranked below every live one, when live work
// leaves a slot idle.

// BatchConfig configures the Batch API.
type BatchConfig struct {
	// Path is the store's file (bbolt), unused with store.redis (which
	// keeps the batches for every replica). Empty without store.redis means the Batch API is off
	// in a Gateway built by New (/v1/files and /v1/batches answer 404
	// naming this field); `sluice serve` fills in DefaultBatchPath().
	Path string `yaml:"path"`
	// Disabled turns the Batch API off, even in `sluice serve`.
	Disabled bool `yaml:"disabled"`
	// Class is the priority class items are admitted at. Empty means
	// "pipeline", which is added to classes (at Rank) when it is not
	// there, and to every tenant's classes when they are restricted.
	Class string `yaml:"class"`
	// Rank is the rank of the class when batch adds it. Nil means 0: with
	// speculative work, below every live class.
	Rank *int `yaml:"rank"`
	// MaxFileBytes bounds an uploaded file. Zero means 100 MiB; at most
	// 1 GiB (a file is held in memory while it is checked).
	MaxFileBytes int64 `yaml:"max_file_bytes"`
	// MaxRequests bounds the requests of one file. Zero means 50000.
	MaxRequests int `yaml:"max_requests"`
	// MaxBacklog bounds the items not yet run, all batches together: a
	// batch that would pass it is refused with 429. Zero means 1000000.
	MaxBacklog int `yaml:"max_backlog"`
	// MaxBacklogBytes bounds their request bodies. Zero means 1 GiB.
	MaxBacklogBytes int64 `yaml:"max_backlog_bytes"`
	// MaxTenantBacklog and MaxTenantBacklogBytes bound one tenant's share.
	// Zero means 250000 items and 256 MiB.
	MaxTenantBacklog      int   `yaml:"max_tenant_backlog"`
	MaxTenantBacklogBytes int64 `yaml:"max_tenant_backlog_bytes"`
	// MaxWindow is the longest completion_window a batch may ask for.
	// Zero means 168h.
	MaxWindow Duration `yaml:"max_window"`
	// MaxWaiting is how many items may wait in the gate for a slot at
	// once. Zero means 2: enough that an idle slot is filled without
	// delay, few enough that items never crowd the queue.
	MaxWaiting int `yaml:"max_waiting"`
}

const (
	defaultBatchClass   = "pipeline"
	defaultMaxFileBytes = 100 << 20
	maxMaxFileBytes     = 1 << 30
	defaultMaxRequests  = 50000
	defaultMaxBacklog   = 1000000
	defaultMaxWindow    = 168 * time.Hour
)

// DefaultBatchPath is where `sluice serve` keeps batches when batch.path
// is unset: $XDG_STATE_HOME/sluice/batch.db, or
// ~/.local/state/sluice/batch.db.
func DefaultBatchPath() (string, error) {
	dir := os.Getenv("XDG_STATE_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("batch.path: no home directory to default it under: %w", err)
		}
		dir = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(dir, "sluice", "batch.db"), nil
}

func (b BatchConfig) on() bool { return b.Path != "" && !b.Disabled }

// batchOn says whether the Batch API is on: batch.path is set, or
// store.redis is (which then keeps the batches) and passthrough does not
// forward the Batch API's paths; and batch.disabled is not.
func (c Config) batchOn() bool {
	return !c.Batch.Disabled && (c.Batch.Path != "" || c.Store != nil && c.Store.Redis != nil && !c.PassesBatchThrough())
}

func (b BatchConfig) withDefaults() BatchConfig {
	if b.Class == "" {
		b.Class = defaultBatchClass
	}
	if b.Rank == nil {
		b.Rank = new(0)
	}
	if b.MaxFileBytes == 0 {
		b.MaxFileBytes = defaultMaxFileBytes
	}
	if b.MaxRequests == 0 {
		b.MaxRequests = defaultMaxRequests
	}
	if b.MaxBacklog == 0 {
		b.MaxBacklog = defaultMaxBacklog
	}
	if b.MaxBacklogBytes == 0 {
		b.MaxBacklogBytes = 1 << 30
	}
	if b.MaxTenantBacklog == 0 {
		b.MaxTenantBacklog = 250000
	}
	if b.MaxTenantBacklogBytes == 0 {
		b.MaxTenantBacklogBytes = 256 << 20
	}
	if b.MaxWindow == 0 {
		b.MaxWindow = Duration(defaultMaxWindow)
	}
	if b.MaxWaiting == 0 {
		b.MaxWaiting = 2
	}
	return b
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
	if slices.ContainsFunc(c.Tenants, func(t TenantConfig) bool { return len(t.Classes) > 0 && !slices.Contains(t.Classes, class) }) {
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

func (b BatchConfig) validate(on bool) error {
	if !on {
		return nil
	}
	for _, err := range []error{
		intIn("batch.max_file_bytes", b.MaxFileBytes, 1, maxMaxFileBytes),
		intIn("batch.max_requests", b.MaxRequests, 1, 10000000),
		intIn("batch.max_backlog", b.MaxBacklog, 1, 100000000),
		intIn("batch.max_backlog_bytes", b.MaxBacklogBytes, 1, 1<<40),
		intIn("batch.max_tenant_backlog", b.MaxTenantBacklog, 1, 100000000),
		intIn("batch.max_tenant_backlog_bytes", b.MaxTenantBacklogBytes, 1, 1<<40),
		intIn("batch.max_waiting", b.MaxWaiting, 1, 1024),
		intIn("batch.rank", *b.Rank, 0, admission.MaxRanks-1),
		durationIn("batch.max_window", b.MaxWindow, time.Second, 365*24*time.Hour),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// batchAPI is the gateway's Batch API and the executor of its items.
type batchAPI struct {
	g     *Gateway
	cfg   BatchConfig
	store batch.JobStore
	exec  *batch.Executor
	rank  int
	now   func() time.Time
}

// openBatch opens the store when the Batch API is on; nil when it is off.
// With store.redis the batches live in Redis, shared by the replicas (each
// claims items as a consumer named by its replica id); otherwise in the
// bbolt file at batch.path.
func (g *Gateway) openBatch(getenv func(string) string) (*batchAPI, error) {
	cfg := g.cfg.Batch
	if !g.cfg.batchOn() {
		return nil, nil
	}
	var js batch.JobStore
	owner, lease := "", time.Duration(0)
	if sc := g.cfg.Store; sc != nil && sc.Redis != nil {
		opened := g.books.redis != nil
		if err := g.openRedis(sc.Redis, getenv); err != nil {
			return nil, err
		}
		if !opened { // neither the books nor the lease opened it: its metrics are not registered yet
			g.metrics.reg.MustRegister(g.books.redis.Collector())
		}
		js = store.NewJobs(g.books.redis, store.JobsOptions{})
		owner = replicaID()
		if g.books.cluster != nil {
			owner = g.books.cluster.id
		}
		// An item's call ends by limits.max_timeout: a claim older than
		// that and the time to write its result is a replica's that died,
		// and another takes it over.
		lease = g.cfg.Limits.MaxTimeout.D() + batchLeaseMargin
	} else {
		bs, err := batch.OpenBolt(cfg.Path, 500*time.Millisecond)
		if err != nil {
			if errors.Is(err, batch.ErrLocked) {
				return nil, fmt.Errorf("config: batch.path: %w (another sluice holds it; give each its own batch.path)", err)
			}
			return nil, fmt.Errorf("config: batch.path: %w", err)
		}
		js = bs
	}
	rank, err := g.chain.Rank(admission.Request{Class: cfg.Class})
	if err != nil { // the class was added to classes: cannot happen
		js.Close()
		return nil, fmt.Errorf("config: batch.class: %w", err)
	}
	b := &batchAPI{g: g, cfg: cfg, store: js, rank: rank, now: time.Now}
	// Claimed items are what a crash runs again: no more than the slots
	// and the waiting places, counting those whose answer is being
	// written — the slots as they are now, moved by a reload or the
	// cluster's lease.
	b.exec = batch.NewExecutor(batch.ExecutorConfig{Store: js, Doer: b, Owner: owner, Lease: lease, MaxWaiting: cfg.MaxWaiting,
		MaxRunningFunc: func() int { return g.stats().Concurrency + cfg.MaxWaiting },
		Grace:          g.cfg.ShutdownGrace.D(), Log: g.log})
	g.metrics.reg.MustRegister(batchCollector{b})
	return b, nil
}

// batchLeaseMargin is the time past limits.max_timeout a replica's claim
// on an item lasts in the shared store: for the answer to be written.
const batchLeaseMargin = 5 * time.Second

var (
	descBatchBacklog = prometheus.NewDesc("sluice_batch_backlog_items", "Batch items not yet run (queued or running), all batches.", nil, nil)
	descBatchBytes   = prometheus.NewDesc("sluice_batch_backlog_bytes", "Bytes of the batch items not yet run.", nil, nil)
	descBatchDrain   = prometheus.NewDesc("sluice_batch_estimated_drain_seconds",
		"How long the backlog would take to run at the rate items have been ending (the slots' rate without one): when the newest batch would end.", nil, nil)
	descBatchItems = prometheus.NewDesc("sluice_batch_items_total",
		"Batch items by outcome: completed, failed, expired; deferred counts the runs sluice refused and put back (overload, spend ceiling), retried those the provider failed.", []string{"outcome"}, nil)
)

// batchCollector reads the backlog from the store and the executor's
// counters at each scrape.
type batchCollector struct{ b *batchAPI }

func (c batchCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descBatchBacklog
	ch <- descBatchBytes
	ch <- descBatchDrain
	ch <- descBatchItems
}

func (c batchCollector) Collect(ch chan<- prometheus.Metric) {
	if n, size, err := c.b.store.Backlog(context.Background(), ""); err == nil {
		ch <- prometheus.MustNewConstMetric(descBatchBacklog, prometheus.GaugeValue, float64(n))
		ch <- prometheus.MustNewConstMetric(descBatchBytes, prometheus.GaugeValue, float64(size))
		if est, _, ok := c.b.estimate(n, 0); ok {
			ch <- prometheus.MustNewConstMetric(descBatchDrain, prometheus.GaugeValue, est.Seconds())
		}
	}
	st := c.b.exec.Stats()
	for _, o := range []struct {
		name string
		v    uint64
	}{{"completed", st.Completed}, {"failed", st.Failed}, {"expired", st.Expired}, {"deferred", st.Deferred}, {"retried", st.Retried}} {
		ch <- prometheus.MustNewConstMetric(descBatchItems, prometheus.CounterValue, float64(o.v), o.name)
	}
}

// IsBatchStoreInUse says whether New failed because another process holds
// batch.path.
func IsBatchStoreInUse(err error) bool { return errors.Is(err, batch.ErrLocked) }

// RunBatch runs the batches' items until ctx ends, lets the running ones
// finish for shutdown_grace, then closes the store. Server.Serve runs it;
// a program that mounts the Gateway itself should too. Without the Batch
// API it returns at once. Call it once.
func (g *Gateway) RunBatch(ctx context.Context) error {
	if g.batch == nil {
		return nil
	}
	g.batch.exec.Run(ctx)
	return g.batch.store.Close()
}

// Waiting is the items (with speculative work) waiting in the gate at the
// batch class's rank.
func (b *batchAPI) Waiting() int {
	st := b.g.stats()
	if b.rank < len(st.Depth) {
		return st.Depth[b.rank]
	}
	return 0
}

// Do runs one item as a live call of the item's tenant: the same chain
// (at the batch class), the same upstream transport, the same books.
func (b *batchAPI) Do(ctx context.Context, c batch.Claim) batch.Response {
	g := b.g
	if g.draining.Load() {
		return batch.Response{Deferred: true, RetryAfter: time.Second}
	}
	info, ok := g.tenantInfo(c.Tenant)
	if !ok {
		return batch.Response{Status: http.StatusForbidden,
			Body: []byte(`{"error":{"message":"the batch's tenant is no longer configured","type":"invalid_request_error","code":"unknown_tenant"}}`)}
	}
	gated := g.routes.exact[c.Request.URL]
	if gated == nil || !gated.gated {
		return batch.Response{Status: http.StatusNotFound, Body: []byte(`{"error":{"message":"not a batch endpoint","type":"invalid_request_error","code":"not_found"}}`)}
	}
	rt := *gated
	rt.class = b.cfg.Class
	timeout := min(time.Until(c.Deadline), g.cfg.Limits.MaxTimeout.D())
	if timeout < time.Millisecond {
		return batch.Response{Deferred: true}
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://sluice.batch"+c.Request.URL, bytes.NewReader(c.Request.Body))
	if err != nil {
		return batch.Response{Err: err}
	}
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(contract.HeaderTimeoutMs, strconv.FormatInt(timeout.Milliseconds(), 10))
	w := &capture{header: http.Header{}}
	g.serveCall(w, r, &rt, c.Tenant, info.Tier)
	if w.status == 0 {
		if ctx.Err() != nil {
			return batch.Response{Err: ctx.Err()}
		}
		w.status = http.StatusBadGateway
	}
	resp := batch.Response{Status: w.status, RequestID: w.header.Get("X-Request-Id"), Body: w.body.Bytes()}
	if reason := w.header.Get(contract.HeaderReason); reason != "" && (w.status == http.StatusTooManyRequests || w.status == http.StatusServiceUnavailable) {
		// Refused by sluice (overload, the spend ceiling, a budget,
		// draining): deferred, not failed.
		resp.Deferred = true
		if ms, err := strconv.ParseInt(w.header.Get("retry-after-ms"), 10, 64); err == nil {
			resp.RetryAfter = time.Duration(ms) * time.Millisecond
		}
	}
	return resp
}

// capture is the response writer of an item's call: it keeps the answer
// (bounded) for the output file.
type capture struct {
	header http.Header
	status int
	body   bytes.Buffer
}

const maxItemResponse = 64 << 20

func (c *capture) Header() http.Header { return c.header }
func (c *capture) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
}
func (c *capture) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if c.body.Len()+len(p) > maxItemResponse {
		return 0, errors.New("batch: response larger than 64 MiB")
	}
	return c.body.Write(p)
}
func (c *capture) Flush() {}

// serveBatchAPI answers /v1/files… and /v1/batches… for the tenant.
func (g *Gateway) serveBatchAPI(w http.ResponseWriter, r *http.Request, tenant string) {
	b := g.batch
	if b == nil {
		g.metrics.badInput.WithLabelValues("not_found").Inc()
		writeError(w, http.StatusNotFound, contract.ErrorTypeInvalidRequest, "not_found",
			"the Batch API is off: set batch.path or store.redis in the config (sluice serve keeps it under the state directory unless batch.disabled is set)")
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/") // v1, files|batches, id?, sub?
	method := r.Method
	switch {
	case len(parts) == 2 && parts[1] == "files" && method == http.MethodPost:
		b.uploadFile(w, r, tenant)
	case len(parts) == 3 && parts[1] == "files" && method == http.MethodGet:
		b.getFile(w, r, tenant, parts[2])
	case len(parts) == 4 && parts[1] == "files" && parts[3] == "content" && method == http.MethodGet:
		b.fileContent(w, r, tenant, parts[2])
	case len(parts) == 2 && parts[1] == "batches" && method == http.MethodPost:
		b.createBatch(w, r, tenant)
	case len(parts) == 2 && parts[1] == "batches" && method == http.MethodGet:
		b.listBatches(w, r, tenant)
	case len(parts) == 3 && parts[1] == "batches" && method == http.MethodGet:
		b.getBatch(w, r, tenant, parts[2])
	case len(parts) == 4 && parts[1] == "batches" && parts[3] == "cancel" && method == http.MethodPost:
		b.cancel(w, r, tenant, parts[2])
	case len(parts) == 2 || len(parts) <= 4 && b.owns(r.Context(), tenant, parts[1], parts[2]):
		// Not served (listing or deleting files, for one): said only of
		// the tenant's own ids, which tells nothing of others'.
		g.metrics.badInput.WithLabelValues("method_not_allowed").Inc()
		writeError(w, http.StatusMethodNotAllowed, contract.ErrorTypeInvalidRequest, "method_not_allowed",
			"method not allowed on this path (sluice's Batch API serves files.create, files.retrieve, files.content, batches.create, batches.retrieve, batches.list and batches.cancel)")
	default:
		g.notFound(w, r)
	}
}

// owns says whether the tenant has the file or batch id.
func (b *batchAPI) owns(ctx context.Context, tenant, kind, id string) bool {
	if !validID(id) {
		return false
	}
	var err error
	if kind == "files" {
		_, err = b.store.File(ctx, tenant, id)
	} else {
		_, err = b.store.Batch(ctx, tenant, id)
	}
	return err == nil
}

func (b *batchAPI) invalid(w http.ResponseWriter, status int, code, param, msg string) {
	b.g.metrics.badInput.WithLabelValues(code).Inc()
	var p *string
	if param != "" {
		p = &param
	}
	writeJSONError(w, status, contract.ErrorBody{Error: contract.ErrorDetail{Message: msg, Type: contract.ErrorTypeInvalidRequest, Param: p, Code: code}})
}

func (b *batchAPI) failed(w http.ResponseWriter, err error) {
	b.g.log.Error("batch store failed", "err", err)
	writeError(w, http.StatusInternalServerError, "server_error", "batch_store_error", "the batch store failed; try again")
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

type fileJSON struct {
	ID        string  `json:"id"`
	Object    string  `json:"object"`
	Bytes     int64   `json:"bytes"`
	CreatedAt int64   `json:"created_at"`
	Filename  string  `json:"filename"`
	Purpose   string  `json:"purpose"`
	Status    string  `json:"status"`
	Details   *string `json:"status_details"`
}

func fileOf(f batch.File) fileJSON {
	return fileJSON{ID: f.ID, Object: "file", Bytes: f.Bytes, CreatedAt: f.CreatedAt.Unix(), Filename: f.Filename, Purpose: f.Purpose, Status: "processed"}
}

// uploadFile takes a multipart upload (purpose=batch, file=JSONL), checks
// every line (and each body as a live call's would be) and stores it; a
// fault is a 400 naming the line, and nothing is stored.
func (b *batchAPI) uploadFile(w http.ResponseWriter, r *http.Request, tenant string) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		b.invalid(w, http.StatusBadRequest, "invalid_request", "", "POST /v1/files takes multipart/form-data with purpose and file")
		return
	}
	limit := b.cfg.MaxFileBytes
	r.Body = http.MaxBytesReader(w, r.Body, limit+1<<20) // the file plus the form's other parts
	mr, err := r.MultipartReader()
	if err != nil {
		b.invalid(w, http.StatusBadRequest, "invalid_request", "", "reading the multipart form: "+err.Error())
		return
	}
	var purpose, filename string
	var content []byte
	tooBig := func() {
		b.invalid(w, http.StatusBadRequest, "file_too_large", "file",
			fmt.Sprintf("the file is larger than batch.max_file_bytes (%d bytes)", limit))
	}
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				tooBig()
				return
			}
			b.invalid(w, http.StatusBadRequest, "invalid_request", "", "reading the multipart form: "+err.Error())
			return
		}
		switch p.FormName() {
		case "purpose":
			v, err := io.ReadAll(io.LimitReader(p, 64))
			if err != nil {
				b.invalid(w, http.StatusBadRequest, "invalid_request", "purpose", "reading purpose: "+err.Error())
				return
			}
			purpose = string(v)
		case "file":
			filename = p.FileName()
			content, err = io.ReadAll(io.LimitReader(p, limit+1))
			if err != nil {
				var mbe *http.MaxBytesError
				if errors.As(err, &mbe) {
					tooBig()
					return
				}
				b.invalid(w, http.StatusBadRequest, "invalid_request", "file", "reading the file: "+err.Error())
				return
			}
			if int64(len(content)) > limit {
				tooBig()
				return
			}
		}
		p.Close()
	}
	switch {
	case purpose != "batch":
		b.invalid(w, http.StatusBadRequest, "invalid_request", "purpose", fmt.Sprintf("purpose: %q, want batch (the only purpose sluice serves)", purpose))
		return
	case content == nil:
		b.invalid(w, http.StatusBadRequest, "missing_required_parameter", "file", "file is required")
		return
	}
	reqs, ierr := batch.ParseInput(content, b.cfg.MaxRequests)
	if ierr == nil {
		for i, req := range reqs {
			body, err := decodeBody(req.Body)
			switch {
			case err != nil:
				ierr = &batch.InputError{Line: lineOf(content, i), Param: "body", Msg: "body: " + err.Error()}
			case body.stream:
				ierr = &batch.InputError{Line: lineOf(content, i), Param: "body.stream", Msg: "body: stream is not supported in a batch"}
			case body.model == "":
				ierr = &batch.InputError{Line: lineOf(content, i), Param: "body.model", Msg: "body: model is required"}
			}
			if ierr != nil {
				break
			}
		}
	}
	if ierr != nil {
		b.invalid(w, http.StatusBadRequest, "invalid_batch_file", "file", "the file was not stored: "+ierr.Error())
		return
	}
	if len(filename) > 256 {
		filename = filename[:256]
	}
	f := batch.File{ID: newID("file-"), Tenant: tenant, Purpose: "batch", Filename: filename, Bytes: int64(len(content)), CreatedAt: b.now()}
	if err := b.store.PutFile(r.Context(), f, content); err != nil {
		b.failed(w, err)
		return
	}
	writeJSON(w, fileOf(f))
}

// lineOf is the 1-based line of the i-th request (blank lines skipped).
func lineOf(content []byte, i int) int {
	n, seen := 0, -1
	for l := range bytes.Lines(content) {
		n++
		if len(bytes.TrimSpace(l)) > 0 {
			if seen++; seen == i {
				return n
			}
		}
	}
	return n
}

func (b *batchAPI) notFound(w http.ResponseWriter, what, id string) {
	b.invalid(w, http.StatusNotFound, "not_found", "", fmt.Sprintf("no %s with id %q", what, echo(id)))
}

func (b *batchAPI) getFile(w http.ResponseWriter, r *http.Request, tenant, id string) {
	if !validID(id) {
		b.notFound(w, "file", id)
		return
	}
	f, err := b.store.File(r.Context(), tenant, id)
	switch {
	case errors.Is(err, batch.ErrNotFound):
		b.notFound(w, "file", id)
	case err != nil:
		b.failed(w, err)
	default:
		writeJSON(w, fileOf(f))
	}
}

func (b *batchAPI) fileContent(w http.ResponseWriter, r *http.Request, tenant, id string) {
	if !validID(id) {
		b.notFound(w, "file", id)
		return
	}
	content, err := b.store.FileContent(r.Context(), tenant, id)
	switch {
	case errors.Is(err, batch.ErrNotFound):
		b.notFound(w, "file", id)
	case err != nil:
		b.failed(w, err)
	default:
		w.Header().Set("Content-Type", "application/jsonl")
		w.Header().Set("Content-Length", strconv.Itoa(len(content)))
		_, _ = w.Write(content)
	}
}

type batchCreate struct {
	InputFileID      string            `json:"input_file_id"`
	Endpoint         string            `json:"endpoint"`
	CompletionWindow string            `json:"completion_window"`
	Metadata         map[string]string `json:"metadata"`
}

// parseWindow reads a completion window: OpenAI's "24h", or any duration
// in whole seconds, minutes or hours ("90m", "30s").
func parseWindow(s string) (time.Duration, bool) {
	if len(s) < 2 {
		return 0, false
	}
	n, err := strconv.Atoi(s[:len(s)-1])
	if err != nil || n <= 0 || n > 1e7 {
		return 0, false
	}
	switch s[len(s)-1] {
	case 's':
		return time.Duration(n) * time.Second, true
	case 'm':
		return time.Duration(n) * time.Minute, true
	case 'h':
		return time.Duration(n) * time.Hour, true
	}
	return 0, false
}

func (b *batchAPI) createBatch(w http.ResponseWriter, r *http.Request, tenant string) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
	if err != nil {
		b.invalid(w, http.StatusBadRequest, "invalid_request", "", "reading the body: "+err.Error())
		return
	}
	var req batchCreate
	if err := json.Unmarshal(raw, &req); err != nil {
		b.invalid(w, http.StatusBadRequest, "invalid_json", "", "the body is not a JSON object of input_file_id, endpoint, completion_window and metadata: "+err.Error())
		return
	}
	window, ok := parseWindow(req.CompletionWindow)
	switch {
	case req.InputFileID == "":
		b.invalid(w, http.StatusBadRequest, "missing_required_parameter", "input_file_id", "input_file_id is required")
		return
	case !slices.Contains(batch.Endpoints, req.Endpoint):
		b.invalid(w, http.StatusBadRequest, "invalid_value", "endpoint", fmt.Sprintf("endpoint: %q, want one of %s", echo(req.Endpoint), strings.Join(batch.Endpoints, ", ")))
		return
	case !ok || window > b.cfg.MaxWindow.D():
		b.invalid(w, http.StatusBadRequest, "invalid_value", "completion_window",
			fmt.Sprintf("completion_window: %q, want a duration such as 24h, up to batch.max_window (%v)", echo(req.CompletionWindow), b.cfg.MaxWindow.D()))
		return
	case len(req.Metadata) > 16:
		b.invalid(w, http.StatusBadRequest, "invalid_value", "metadata", "metadata: at most 16 pairs")
		return
	}
	for k, v := range req.Metadata {
		if len(k) > 64 || len(v) > 512 {
			b.invalid(w, http.StatusBadRequest, "invalid_value", "metadata", "metadata: keys up to 64 characters, values up to 512")
			return
		}
	}
	if !validID(req.InputFileID) {
		b.notFound(w, "file", req.InputFileID)
		return
	}
	f, err := b.store.File(r.Context(), tenant, req.InputFileID)
	if errors.Is(err, batch.ErrNotFound) || err == nil && f.Purpose != "batch" {
		b.notFound(w, "file", req.InputFileID)
		return
	} else if err != nil {
		b.failed(w, err)
		return
	}
	content, err := b.store.FileContent(r.Context(), tenant, req.InputFileID)
	if err != nil {
		b.failed(w, err)
		return
	}
	reqs, ierr := batch.ParseInput(content, b.cfg.MaxRequests)
	if ierr == nil {
		if ierr = batch.CheckEndpoint(reqs, req.Endpoint); ierr != nil {
			ierr.Line = lineOf(content, ierr.Line-1)
		}
	}
	if ierr != nil {
		b.invalid(w, http.StatusBadRequest, "invalid_batch_file", "input_file_id", "input file: "+ierr.Error())
		return
	}
	backlog, size, err := b.store.Backlog(r.Context(), "")
	if err != nil {
		b.failed(w, err)
		return
	}
	mine, mySize, err := b.store.Backlog(r.Context(), tenant)
	if err != nil {
		b.failed(w, err)
		return
	}
	var bodies int64
	for _, q := range reqs {
		bodies += int64(len(q.Body))
	}
	for _, bound := range []struct {
		field     string
		have, add int64
		max       int64
	}{
		{"batch.max_tenant_backlog", int64(mine), int64(len(reqs)), int64(b.cfg.MaxTenantBacklog)},
		{"batch.max_tenant_backlog_bytes", mySize, bodies, b.cfg.MaxTenantBacklogBytes},
		{"batch.max_backlog", int64(backlog), int64(len(reqs)), int64(b.cfg.MaxBacklog)},
		{"batch.max_backlog_bytes", size, bodies, b.cfg.MaxBacklogBytes},
	} {
		if bound.add > bound.max {
			b.invalid(w, http.StatusBadRequest, "batch_too_large", "input_file_id",
				fmt.Sprintf("the batch's %d alone passes %s (%d): split it", bound.add, bound.field, bound.max))
			return
		}
		if bound.have+bound.add > bound.max {
			b.backlogFull(w, bound.field, bound.have, bound.add, bound.max)
			return
		}
	}
	if est, rate, ok := b.estimate(backlog, len(reqs)); ok && est > window {
		b.cannotFinish(w, backlog, len(reqs), rate, est, window)
		return
	}
	now := b.now()
	bt := batch.Batch{ID: newID("batch_"), Tenant: tenant, Endpoint: req.Endpoint, InputFileID: req.InputFileID,
		CompletionWindow: req.CompletionWindow, Metadata: req.Metadata, CreatedAt: now, InProgressAt: now, ExpiresAt: now.Add(window)}
	if err := b.store.CreateBatch(r.Context(), bt, reqs); err != nil {
		b.failed(w, err)
		return
	}
	b.exec.Notify()
	got, err := b.store.Batch(r.Context(), tenant, bt.ID)
	if err != nil {
		b.failed(w, err)
		return
	}
	writeJSON(w, batchOf(got))
}

// backlogFull refuses a batch past a backlog bound: 429, and a Retry-After
// for when the excess could have drained at the rate items end (a minute
// before there is one; for a bound in bytes, items stand for bytes in
// proportion).
func (b *batchAPI) backlogFull(w http.ResponseWriter, field string, have, add, bound int64) {
	retry := time.Minute
	if rate, ok := b.exec.Rate(); ok && have > 0 {
		backlog, _, _ := b.store.Backlog(context.Background(), "")
		excess := float64(have+add-bound) / float64(have) * float64(backlog)
		retry = max(time.Second, time.Duration(excess/rate*float64(time.Second)))
	}
	retryMs := ceilMs(retry)
	b.g.metrics.badInput.WithLabelValues("batch_backlog_full").Inc()
	w.Header().Set(contract.HeaderRetryAfter, strconv.FormatInt(ceilSeconds(retry), 10))
	w.Header().Set(contract.HeaderRetryAfterMs, strconv.FormatInt(retryMs, 10))
	writeJSONError(w, http.StatusTooManyRequests, contract.ErrorBody{Error: contract.ErrorDetail{
		Message: fmt.Sprintf("%d waiting to run and this batch's %d would pass %s (%d); retry after %d ms", have, add, field, bound, retryMs),
		Type:    contract.ErrorTypeRateLimit, Code: "batch_backlog_full", RetryAfterMs: &retryMs}})
}

// estimate is how long the backlog and n more items would take to run, at
// the rate items have been ending while there was a backlog — the spare
// capacity live work has been leaving — or, without one, at the rate the
// slots serve calls (every slot idle: an estimate that refuses only what
// cannot fit). ok is false before any call has been timed.
func (b *batchAPI) estimate(backlog, n int) (est time.Duration, rate float64, ok bool) {
	rate, ok = b.exec.Rate()
	if !ok || backlog == 0 {
		st := b.g.stats()
		if st.ServiceMean <= 0 {
			return 0, 0, false
		}
		rate = float64(st.Concurrency) / st.ServiceMean.Seconds()
	}
	return time.Duration(float64(backlog+n) / rate * float64(time.Second)), rate, true
}

// cannotFinish refuses a batch whose estimated completion is past its
// window: 429 with the estimate, and a Retry-After for when enough of the
// backlog ahead will have drained (the whole of it when the batch could
// not fit even alone).
func (b *batchAPI) cannotFinish(w http.ResponseWriter, backlog, n int, rate float64, est, window time.Duration) {
	retry := est - window
	alone := time.Duration(float64(n) / rate * float64(time.Second))
	if alone > window {
		retry = time.Duration(float64(backlog) / rate * float64(time.Second))
	}
	retry = max(retry, time.Second)
	estMs, retryMs := ceilMs(est), ceilMs(retry)
	b.g.metrics.badInput.WithLabelValues("batch_cannot_finish").Inc()
	h := w.Header()
	h.Set(contract.HeaderRetryAfter, strconv.FormatInt(ceilSeconds(retry), 10))
	h.Set(contract.HeaderRetryAfterMs, strconv.FormatInt(retryMs, 10))
	h.Set(contract.HeaderEstimatedWaitMs, strconv.FormatInt(estMs, 10))
	msg := fmt.Sprintf("the batch cannot finish inside its completion_window (%v): %d items ahead and its %d at %.1f items/s would take until about %s (%d ms); retry after %d ms",
		window, backlog, n, rate, b.now().Add(est).UTC().Format(time.RFC3339), estMs, retryMs)
	if alone > window {
		msg += fmt.Sprintf(", or split it: its own %d items need about %v at that rate", n, alone.Round(time.Second))
	}
	writeJSONError(w, http.StatusTooManyRequests, contract.ErrorBody{Error: contract.ErrorDetail{Message: msg,
		Type: contract.ErrorTypeRateLimit, Code: "batch_cannot_finish", EstimatedWaitMs: &estMs, RetryAfterMs: &retryMs}})
}

type batchJSON struct {
	ID               string            `json:"id"`
	Object           string            `json:"object"`
	Endpoint         string            `json:"endpoint"`
	Errors           *struct{}         `json:"errors"`
	InputFileID      string            `json:"input_file_id"`
	CompletionWindow string            `json:"completion_window"`
	Status           string            `json:"status"`
	OutputFileID     *string           `json:"output_file_id"`
	ErrorFileID      *string           `json:"error_file_id"`
	CreatedAt        int64             `json:"created_at"`
	InProgressAt     *int64            `json:"in_progress_at"`
	ExpiresAt        *int64            `json:"expires_at"`
	FinalizingAt     *int64            `json:"finalizing_at"`
	CompletedAt      *int64            `json:"completed_at"`
	FailedAt         *int64            `json:"failed_at"`
	ExpiredAt        *int64            `json:"expired_at"`
	CancellingAt     *int64            `json:"cancelling_at"`
	CancelledAt      *int64            `json:"cancelled_at"`
	RequestCounts    countsJSON        `json:"request_counts"`
	Metadata         map[string]string `json:"metadata"`
}

func unix(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	u := t.Unix()
	return &u
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func batchOf(b batch.Batch) batchJSON {
	return batchJSON{ID: b.ID, Object: "batch", Endpoint: b.Endpoint, InputFileID: b.InputFileID, CompletionWindow: b.CompletionWindow,
		Status: string(b.Status), OutputFileID: optional(b.OutputFileID), ErrorFileID: optional(b.ErrorFileID),
		CreatedAt: b.CreatedAt.Unix(), InProgressAt: unix(b.InProgressAt), ExpiresAt: unix(b.ExpiresAt), FinalizingAt: unix(b.FinalizingAt),
		CompletedAt: unix(b.CompletedAt), ExpiredAt: unix(b.ExpiredAt), CancellingAt: unix(b.CancellingAt), CancelledAt: unix(b.CancelledAt),
		RequestCounts: countsJSON(b.Counts), Metadata: b.Metadata}
}

type countsJSON struct {
	Total     int `json:"total"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
}

func (b *batchAPI) getBatch(w http.ResponseWriter, r *http.Request, tenant, id string) {
	if !validID(id) {
		b.notFound(w, "batch", id)
		return
	}
	got, err := b.store.Batch(r.Context(), tenant, id)
	switch {
	case errors.Is(err, batch.ErrNotFound):
		b.notFound(w, "batch", id)
	case err != nil:
		b.failed(w, err)
	default:
		writeJSON(w, batchOf(got))
	}
}

func (b *batchAPI) listBatches(w http.ResponseWriter, r *http.Request, tenant string) {
	q := r.URL.Query()
	limit := 20
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100 {
			b.invalid(w, http.StatusBadRequest, "invalid_value", "limit", "limit: want 1 to 100")
			return
		}
		limit = n
	}
	after := q.Get("after")
	if after != "" && !validID(after) {
		b.notFound(w, "batch", after)
		return
	}
	list, more, err := b.store.Batches(r.Context(), tenant, after, limit)
	switch {
	case errors.Is(err, batch.ErrNotFound):
		b.notFound(w, "batch", after)
		return
	case err != nil:
		b.failed(w, err)
		return
	}
	out := struct {
		Object  string      `json:"object"`
		Data    []batchJSON `json:"data"`
		FirstID *string     `json:"first_id"`
		LastID  *string     `json:"last_id"`
		HasMore bool        `json:"has_more"`
	}{Object: "list", Data: []batchJSON{}, HasMore: more}
	for _, bt := range list {
		out.Data = append(out.Data, batchOf(bt))
	}
	if len(list) > 0 {
		out.FirstID, out.LastID = &list[0].ID, &list[len(list)-1].ID
	}
	writeJSON(w, out)
}

func (b *batchAPI) cancel(w http.ResponseWriter, r *http.Request, tenant, id string) {
	if !validID(id) {
		b.notFound(w, "batch", id)
		return
	}
	got, err := b.store.Cancel(r.Context(), tenant, id, b.now())
	switch {
	case errors.Is(err, batch.ErrNotFound):
		b.notFound(w, "batch", id)
	case errors.Is(err, batch.ErrConflict):
		b.invalid(w, http.StatusConflict, "batch_not_cancellable", "", err.Error())
	case err != nil:
		b.failed(w, err)
	default:
		writeJSON(w, batchOf(got))
	}
}

// validateBatch checks the batch section, and that passthrough does not
// forward the paths the Batch API serves.
func (c Config) validateBatch() error {
	if err := c.Batch.validate(c.batchOn()); err != nil {
		return err
	}
	if !c.batchOn() {
		return nil
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
