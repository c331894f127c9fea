// Package batchapi is the gateway's Batch API: OpenAI's /v1/files and
// /v1/batches, served by sluice itself rather than forwarded. A tenant
// uploads a JSONL file of requests and creates a batch of it; each item
// then runs through the gateway as a live call of that tenant's — the
// same admission chain, upstream and books — at a class ranked below
// every live one, when live work leaves a slot idle.
//
// The model: files and batches are the tenant's own (another tenant's ids
// are 404s, never 403s), kept in a batch.JobStore — a bbolt file on local
// disk, or Redis shared by the replicas, each claiming items under its
// own name. The executor (package batch) claims items and runs them with
// API.Do, which hands each to Deps.Handler through a ResponseWriter that
// keeps the answer for the output file. A refusal of sluice's own
// (overload, the spend ceiling, draining) defers the item instead of
// failing it; at most Config.MaxWaiting items wait in the gate at once, so
// that items never crowd the queue live calls wait in.
//
// A batch goes through OpenAI's statuses: created validating, its file is
// checked line by line by the API's settle loop (settle.go), which starts
// it (in_progress) or fails it with every bad line listed; once its items
// have all ended it is finalizing while the loop writes its files, then
// completed, expired or cancelled. Hooks let a test hold a batch before
// each of those steps, to observe the statuses between them.
//
// A batch is refused at submission, with 429 and a Retry-After, when it
// would pass a backlog bound (all tenants, or its own tenant's share) or
// could not finish inside its completion window at the rate items have
// been ending — the spare capacity live work leaves.
//
// A call the store cannot serve because Redis does not answer
// (store.ErrUnavailable) is a 503 store_unavailable with a Retry-After
// for the store's next probe of Redis, at once rather than after a wait:
// every call to Redis is bounded by its timeout, and none is made while
// the store's circuit breaker is open. Any other failure of the store is
// a 500.
//
// Files are streamed: an upload goes to the store a chunk at a time as it
// is read (JobStore.StageFile), checked on the way (batch.NewFileCheck),
// and is served, validated and queued a chunk or a line at a time; no
// step holds a file whole. Each tenant's files are bounded in count and
// bytes (Config.MaxTenantFiles, MaxTenantFileBytes), listed and deleted
// as OpenAI's, and deleted with their batches past Config.Retention by
// the settle loop's purge.
//
// Goals: the OpenAI SDKs' files and batches calls work unchanged; a batch
// never slows live work beyond the items already waiting; a crash runs
// again at most the items claimed; memory does not grow with a file's
// size. Non-goals: files of purposes other than batch, Anthropic's
// batches, and streaming items.
//
// The gateway authenticates the caller, routes the paths here (API.Serve)
// and gives the API what it needs of itself as Deps; this package does
// not import the gateway.
package batchapi
