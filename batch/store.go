package batch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"time"
)

// ErrNotFound is returned for a file or batch that does not exist or
// belongs to another tenant: the two are not told apart, so that an id
// says nothing about other tenants.
var ErrNotFound = errors.New("batch: not found")

// ErrConflict is returned when a batch is not in a state the operation
// takes (cancelling a completed batch, for instance).
var ErrConflict = errors.New("batch: conflict")

// ChunkBytes is the most of a file's content one value of a store holds,
// and one read or write of it moves: a file is stored as chunks of this
// size, written as it is read and served a chunk at a time, so that no
// step holds a whole file in memory or in one value.
const ChunkBytes = 1 << 20

// Quota bounds what one tenant keeps in uploaded files (purpose batch;
// the output and error files the store writes are not counted). Zero
// fields mean no bound.
type Quota struct {
	MaxFiles int
	MaxBytes int64
}

// QuotaError is CommitFile's refusal of a file past the tenant's Quota:
// Bytes says which bound (the bytes, or else the count), Used and Max are
// its value before the file and its bound.
type QuotaError struct {
	Bytes     bool
	Used, Max int64
}

func (e *QuotaError) Error() string {
	if e.Bytes {
		return fmt.Sprintf("batch: the tenant's files hold %d bytes, and this one would pass %d", e.Used, e.Max)
	}
	return fmt.Sprintf("batch: the tenant has %d files, the most it may keep", e.Used)
}

// Status is a batch's state, OpenAI's names.
type Status string

// The statuses of a batch, OpenAI's. A batch is created validating: its
// file is checked line by line (Start or Fail end it); then in_progress
// while its items run; finalizing once every item has a result, while its
// output and error files are written (Finalize ends it); then completed,
// or expired when its window passed first. A cancelled batch goes
// cancelling → cancelled; one whose file does not validate, failed.
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
	// ExpiresAt is when the file stops being served (ErrNotFound after
	// it); zero means never.
	ExpiresAt time.Time
}

// Expired says whether f is past its ExpiresAt at now.
func (f File) Expired(now time.Time) bool { return !f.ExpiresAt.IsZero() && !now.Before(f.ExpiresAt) }

// Counts are a batch's request_counts: Failed includes the expired items;
// cancelled items count in neither.
type Counts struct {
	Total, Completed, Failed int
}

// Usage is the tokens of a batch's answers, summed as they are written:
// OpenAI's usage object (input, output, and their cached and reasoning
// parts).
type Usage struct {
	InputTokens     int64 `json:"input_tokens"`
	OutputTokens    int64 `json:"output_tokens"`
	CachedTokens    int64 `json:"cached_tokens,omitempty"`
	ReasoningTokens int64 `json:"reasoning_tokens,omitempty"`
}

// Add adds u's tokens to x.
func (x *Usage) Add(u Usage) {
	x.InputTokens += u.InputTokens
	x.OutputTokens += u.OutputTokens
	x.CachedTokens += u.CachedTokens
	x.ReasoningTokens += u.ReasoningTokens
}

// LineError is one fault of a batch's input file, found while it was
// validating: OpenAI's batch error (code, line, message, param). Line is
// 1-based; 0 means the file as a whole.
type LineError struct {
	Code    string `json:"code"`
	Line    int    `json:"line,omitempty"`
	Message string `json:"message"`
	Param   string `json:"param,omitempty"`
}

// Batch is one batch job.
type Batch struct {
	ID               string
	Tenant           string
	Endpoint         string
	InputFileID      string
	CompletionWindow string // the window, e.g. "24h" (or sluice's own, such as "1h")
	Metadata         map[string]string
	// OutputExpiresAfter, when not zero, is how long its output and error
	// files are served after they are written (OpenAI's
	// output_expires_after, anchored at the files' created_at).
	OutputExpiresAfter time.Duration
	Status             Status
	// Lines and LineBytes are its file's requests and their bytes, counted
	// when it is created: its share of the backlog while it validates.
	Lines     int
	LineBytes int64
	// Model is the model its lines name (one model a batch), set by Start.
	Model  string
	Counts Counts
	// Usage sums the usage of the answers written so far.
	Usage Usage
	// Errors are why it failed validation, in line order.
	Errors       []LineError
	OutputFileID string // set when it ends with at least one success
	ErrorFileID  string // set when it ends with at least one failure, expiry or cancellation
	CreatedAt    time.Time
	InProgressAt time.Time
	ExpiresAt    time.Time // CreatedAt + the completion window: every item's deadline
	FinalizingAt time.Time
	FailedAt     time.Time
	CompletedAt  time.Time
	ExpiredAt    time.Time
	CancellingAt time.Time
	CancelledAt  time.Time
	// Cancelled counts the items cancelled before they ran.
	Cancelled int
}

// Request is one line of an input file.
type Request struct {
	CustomID string          `json:"custom_id"`
	Method   string          `json:"method"`
	URL      string          `json:"url"`
	Body     json.RawMessage `json:"body"`
	// Line is the request's 1-based line in its file (ParseInput's; not
	// stored).
	Line int `json:"-"`
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
	// Usage is the answer's usage, added to the batch's.
	Usage Usage
}

// JobStore keeps files, batches, item states and results. Implementations
// are safe for concurrent use. The item methods are shaped for a queue
// with consumer groups (Redis Streams): Claim is a read by a consumer with
// a lease, Complete is the acknowledgement, an expired lease is reclaimed.
type JobStore interface {
	// StageFile writes content, read to its end, as the content of the
	// file id, ChunkBytes at a time, and returns its size: the file is not
	// seen until CommitFile makes it so. An error reading content is
	// returned as it is (errors.Is and As see it), and what was written is
	// dropped. Staged content that is never committed is dropped by
	// AbortFile, or by Purge after an hour.
	StageFile(ctx context.Context, id string, content io.Reader) (int64, error)
	// CommitFile makes the staged content of f.ID the file f (f.Bytes is
	// its staged size), within the tenant's quota q (counted for purpose
	// batch): a *QuotaError past it, the content left staged. ErrConflict
	// when f.ID exists.
	CommitFile(ctx context.Context, f File, q Quota) error
	// AbortFile drops the staged content of id.
	AbortFile(ctx context.Context, id string) error
	// File returns the tenant's file, or ErrNotFound.
	File(ctx context.Context, tenant, id string) (File, error)
	// FileContent opens the tenant's file's content, read a chunk at a
	// time, or ErrNotFound. A file deleted while it is read ends the read
	// with ErrNotFound.
	FileContent(ctx context.Context, tenant, id string) (io.ReadCloser, error)
	// Files lists the tenant's files of purpose (every purpose when empty)
	// by creation, newest first or, asc, oldest first, starting after the
	// file id after; more says whether there are others past limit.
	// ErrNotFound when after is not the tenant's file.
	Files(ctx context.Context, tenant, purpose, after string, limit int, asc bool) (list []File, more bool, err error)
	// DeleteFile deletes the tenant's file and its content, or ErrNotFound.
	// A batch that validates from it afterwards fails; one running already
	// has its requests.
	DeleteFile(ctx context.Context, tenant, id string) error
	// FileUsage is the tenant's uploaded files (purpose batch): their
	// count and bytes, as the quota counts them.
	FileUsage(ctx context.Context, tenant string) (files int, bytes int64, err error)
	// Purge deletes what is past its time at now: the files past their
	// ExpiresAt, the batches ended more than retention ago (with their
	// items and results; their files go by their own ExpiresAt), and
	// staged content older than an hour. It returns how many files and
	// batches it deleted.
	Purge(ctx context.Context, now time.Time, retention time.Duration) (int, error)
	// CreateBatch stores b. With b.Status validating it stores the batch
	// alone (reqs must be empty), for Start or Fail to end its
	// validation; otherwise it stores it in_progress (Counts.Total =
	// len(reqs)) and queues one item per request, in order.
	CreateBatch(ctx context.Context, b Batch, reqs []Request) error
	// Start ends the validation of the tenant's batch: it becomes
	// in_progress with model and one item per request queued, in order.
	// The requests are read from reqs as they are written, a chunk at a
	// time; an error from reqs is returned, the batch left validating.
	// ErrConflict when it is not validating (cancelled meanwhile, or
	// started by another replica).
	Start(ctx context.Context, tenant, id, model string, reqs iter.Seq2[Request, error], now time.Time) error
	// Fail ends the validation of the tenant's batch as failed, with errs.
	// ErrConflict when it is not validating.
	Fail(ctx context.Context, tenant, id string, errs []LineError, now time.Time) error
	// Finalize writes the output and error files of the tenant's batch
	// once every item has a result (it is finalizing, or cancelling with
	// nothing left to run) and ends it: completed, expired or cancelled.
	// ErrConflict when it is not ready.
	Finalize(ctx context.Context, tenant, id string, now time.Time) (Batch, error)
	// Pending lists every tenant's batches that wait for Start, Fail or
	// Finalize: validating, finalizing, and cancelling with nothing left
	// to run. A batch whose step was cut short by a crash is listed again.
	Pending(ctx context.Context) ([]Batch, error)
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
	// expiry). The last result of a batch makes it finalizing (cancelling
	// stays cancelling) for Finalize.
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

// PutFile stores content as the file f in s: StageFile then CommitFile
// without a quota.
func PutFile(ctx context.Context, s JobStore, f File, content []byte) error {
	n, err := s.StageFile(ctx, f.ID, bytes.NewReader(content))
	if err != nil {
		return err
	}
	f.Bytes = n
	if err := s.CommitFile(ctx, f, Quota{}); err != nil {
		_ = s.AbortFile(ctx, f.ID)
		return err
	}
	return nil
}

// Slice is reqs as Start reads them.
func Slice(reqs []Request) iter.Seq2[Request, error] {
	return func(yield func(Request, error) bool) {
		for _, r := range reqs {
			if !yield(r, nil) {
				return
			}
		}
	}
}

// chunkReader reads a file's content a chunk at a time: get returns chunk
// i, or nil past the last.
type chunkReader struct {
	get func(i int) ([]byte, error)
	i   int
	buf []byte
	err error
}

// NewChunkReader reads the chunks get returns, in order, until it returns
// nil (the end) or an error: a store's FileContent.
func NewChunkReader(get func(i int) ([]byte, error)) io.ReadCloser {
	return &chunkReader{get: get}
}

func (c *chunkReader) Read(p []byte) (int, error) {
	for len(c.buf) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		b, err := c.get(c.i)
		c.i++
		switch {
		case err != nil:
			c.err = err
		case b == nil:
			c.err = io.EOF
		default:
			c.buf = b
		}
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}

func (c *chunkReader) Close() error {
	c.buf, c.err = nil, errClosed
	return nil
}

var errClosed = errors.New("batch: file content read after Close")

// Fill reads r into buf until buf is full or r ends: n < len(buf) means r
// ended. Unlike io.ReadFull it returns r's own errors as they are — a
// multipart part cut short says io.ErrUnexpectedEOF, which io.ReadFull
// would have made look like a short last read — and nil at r's end.
func Fill(r io.Reader, buf []byte) (n int, err error) {
	for n < len(buf) {
		k, err := r.Read(buf[n:])
		n += k
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
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

// UsageOf reads the usage of an answer's body, in any of the shapes the
// batch endpoints give it: chat and completions (prompt_tokens,
// completion_tokens and their details), embeddings (prompt_tokens) and
// responses (input_tokens, output_tokens and their details). A body
// without one is zero usage.
func UsageOf(body []byte) Usage {
	var v struct {
		Usage *struct {
			PromptTokens        int64 `json:"prompt_tokens"`
			CompletionTokens    int64 `json:"completion_tokens"`
			InputTokens         int64 `json:"input_tokens"`
			OutputTokens        int64 `json:"output_tokens"`
			PromptTokensDetails struct {
				CachedTokens int64 `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
			InputTokensDetails struct {
				CachedTokens int64 `json:"cached_tokens"`
			} `json:"input_tokens_details"`
			CompletionTokensDetails struct {
				ReasoningTokens int64 `json:"reasoning_tokens"`
			} `json:"completion_tokens_details"`
			OutputTokensDetails struct {
				ReasoningTokens int64 `json:"reasoning_tokens"`
			} `json:"output_tokens_details"`
		} `json:"usage"`
	}
	if json.Unmarshal(body, &v) != nil || v.Usage == nil {
		return Usage{}
	}
	u := v.Usage
	return Usage{InputTokens: u.PromptTokens + u.InputTokens, OutputTokens: u.CompletionTokens + u.OutputTokens,
		CachedTokens:    u.PromptTokensDetails.CachedTokens + u.InputTokensDetails.CachedTokens,
		ReasoningTokens: u.CompletionTokensDetails.ReasoningTokens + u.OutputTokensDetails.ReasoningTokens}
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
