package batch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ErrNotFound is returned for a file or batch that does not exist or
// belongs to another tenant: the two are not told apart, so that an id
// says nothing about other tenants.
var ErrNotFound = errors.New("batch: not found")

// ErrConflict is returned when a batch is not in a state the operation
// takes (cancelling a completed batch, for instance).
var ErrConflict = errors.New("batch: conflict")

// Status is a batch's state, OpenAI's names.
type Status string

// The statuses of a batch. A batch is created in_progress (its file was
// validated when it was uploaded); it ends completed, expired, cancelled or
// failed. finalizing is the instant its output files are written, inside
// the transaction that writes its last result, so it is never observed.
const (
	StatusValidating Status = "validating"
	StatusFailed     Status = "failed"
	StatusInProgress Status = "in_progress"
	StatusFinalizing Status = "finalizing"
	StatusCompleted  Status = "completed"
	StatusExpired    Status = "expired"
	StatusCancelling Status = "cancelling"
	StatusCancelled  Status = "cancelled"
)

// Terminal says whether no item of the batch will run any more.
func (s Status) Terminal() bool {
	return s == StatusCompleted || s == StatusExpired || s == StatusCancelled || s == StatusFailed
}

// File is an uploaded or generated file.
type File struct {
	ID        string
	Tenant    string
	Purpose   string // "batch" for inputs; "batch_output" for outputs and error files
	Filename  string
	Bytes     int64
	CreatedAt time.Time
}

// Counts are a batch's request_counts: Failed includes the expired items;
// cancelled items count in neither.
type Counts struct {
	Total, Completed, Failed int
}

// Batch is one batch job.
type Batch struct {
	ID               string
	Tenant           string
	Endpoint         string
	InputFileID      string
	CompletionWindow string // as given, e.g. "24h"
	Metadata         map[string]string
	Status           Status
	Counts           Counts
	OutputFileID     string // set when it ends with at least one success
	ErrorFileID      string // set when it ends with at least one failure, expiry or cancellation
	CreatedAt        time.Time
	InProgressAt     time.Time
	ExpiresAt        time.Time // CreatedAt + the completion window: every item's deadline
	FinalizingAt     time.Time
	CompletedAt      time.Time
	ExpiredAt        time.Time
	CancellingAt     time.Time
	CancelledAt      time.Time
	// Cancelled counts the items cancelled before they ran.
	Cancelled int
}

// Request is one line of an input file.
type Request struct {
	CustomID string          `json:"custom_id"`
	Method   string          `json:"method"`
	URL      string          `json:"url"`
	Body     json.RawMessage `json:"body"`
}

// Claim is an item handed to one runner until it completes it, releases
// it, or the lease lapses (and another runner may claim it again).
type Claim struct {
	Batch    string
	Tenant   string
	Index    int // the item's line in the input file, from 0
	Request  Request
	Deadline time.Time // the batch's ExpiresAt
	// Attempts counts the runs released back as attempted (see Release);
	// a reclaim after a crash does not count.
	Attempts int
	Owner    string
}

// Kind is how an item ended.
type Kind uint8

// The kinds of result. Succeeded lines go to the output file, the others
// to the error file.
const (
	Succeeded Kind = iota + 1
	Failed
	Expired
	Cancelled
)

// Result is an item's final line, written once.
type Result struct {
	Kind Kind
	// Line is the JSONL line (without its newline) for the output or error
	// file, as Line and ErrorLine make it.
	Line []byte
}

// JobStore keeps files, batches, item states and results. Implementations
// are safe for concurrent use. The item methods are shaped for a queue
// with consumer groups (Redis Streams): Claim is a read by a consumer with
// a lease, Complete is the acknowledgement, an expired lease is reclaimed.
type JobStore interface {
	// PutFile stores a file and its content under f.ID.
	PutFile(ctx context.Context, f File, content []byte) error
	// File returns the tenant's file, or ErrNotFound.
	File(ctx context.Context, tenant, id string) (File, error)
	// FileContent returns the tenant's file's content, or ErrNotFound.
	FileContent(ctx context.Context, tenant, id string) ([]byte, error)
	// CreateBatch stores b (in_progress, Counts.Total = len(reqs)) and
	// queues one item per request, in order.
	CreateBatch(ctx context.Context, b Batch, reqs []Request) error
	// Batch returns the tenant's batch, or ErrNotFound.
	Batch(ctx context.Context, tenant, id string) (Batch, error)
	// Batches lists the tenant's batches, newest first, starting after the
	// batch id after (empty: from the newest); more says whether there are
	// others past limit.
	Batches(ctx context.Context, tenant, after string, limit int) (list []Batch, more bool, err error)
	// Cancel stops the tenant's batch: its queued items are cancelled at
	// once, its claimed ones finish, and it ends cancelled when the last
	// of them completes. ErrConflict when it has already ended.
	Cancel(ctx context.Context, tenant, id string, now time.Time) (Batch, error)
	// Claim hands out up to max items for owner until now+lease: first
	// those whose lease has lapsed, then queued ones, the tenants taking
	// turns, each tenant's oldest batch first, in line order.
	Claim(ctx context.Context, now time.Time, owner string, lease time.Duration, max int) ([]Claim, error)
	// Release puts a claimed item back in the queue, counting an attempt
	// when attempted. It does nothing when the claim is no longer owner's.
	// An item of a batch cancelled meanwhile is cancelled instead.
	Release(ctx context.Context, c Claim, attempted bool, now time.Time) error
	// Complete writes the item's result, once: written is false when it
	// had one already (a lapsed lease another runner completed, or an
	// expiry). The last result of a batch ends it and writes its files.
	Complete(ctx context.Context, c Claim, r Result, now time.Time) (written bool, err error)
	// ExpireDue ends the batches whose window has passed: each item without
	// a result is expired (its line in the error file). It returns the
	// number of items expired.
	ExpireDue(ctx context.Context, now time.Time) (int, error)
	// Backlog is the items without a result in the unfinished batches of
	// tenant (every tenant's when tenant is empty), and the bytes of their
	// requests' bodies.
	Backlog(ctx context.Context, tenant string) (items int, bytes int64, err error)
	// Close releases the store.
	Close() error
}

// OutputFileID and ErrorFileID name a batch's generated files.
func OutputFileID(batchID string) string { return "file-out-" + batchID }

// ErrorFileID names a batch's error file.
func ErrorFileID(batchID string) string { return "file-err-" + batchID }

// requestID names one item's line, as OpenAI's batch_req_ ids.
func requestID(batchID string, index int) string {
	return fmt.Sprintf("batch_req_%s_%d", batchID, index)
}

type lineResponse struct {
	StatusCode int             `json:"status_code"`
	RequestID  string          `json:"request_id"`
	Body       json.RawMessage `json:"body"`
}

type lineError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type line struct {
	ID       string        `json:"id"`
	CustomID string        `json:"custom_id"`
	Response *lineResponse `json:"response"`
	Error    *lineError    `json:"error"`
}

// Line is an item's line for a response from the provider: the status,
// the provider's request id and the body (which must be JSON; anything
// else is carried as a JSON string).
func Line(c Claim, status int, providerID string, body []byte) []byte {
	raw := json.RawMessage(body)
	if !json.Valid(body) {
		raw, _ = json.Marshal(string(body))
	}
	b, _ := json.Marshal(line{ID: requestID(c.Batch, c.Index), CustomID: c.Request.CustomID,
		Response: &lineResponse{StatusCode: status, RequestID: providerID, Body: raw}})
	return b
}

// ErrorLine is an item's line for an item that got no response: code is
// OpenAI's (batch_expired, batch_cancelled) or sluice's.
func ErrorLine(batchID string, index int, customID, code, msg string) []byte {
	b, _ := json.Marshal(line{ID: requestID(batchID, index), CustomID: customID, Error: &lineError{Code: code, Message: msg}})
	return b
}
