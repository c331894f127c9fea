package gateway

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/batch"
	"github.com/sluicehq/sluice/gateway/batchapi"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
)

// stepper holds every batch before each of the API's steps (validating,
// finalizing, cancelling) and every item before it runs, so that a test
// observes the transient statuses without racing them: a status is seen
// while the step that would end it waits for the test.
type stepper struct {
	steps    chan batch.Batch
	proceed  chan struct{}
	itemSeen chan struct{}                 // an item reached the gate (its batch is in_progress)
	items    atomic.Pointer[chan struct{}] // closed: items run
	done     chan struct{}
}

func newStepper(t *testing.T, s *served) *stepper {
	st := &stepper{steps: make(chan batch.Batch), proceed: make(chan struct{}), itemSeen: make(chan struct{}, 1), done: make(chan struct{})}
	st.hold()
	t.Cleanup(func() { close(st.done) }) // before the gateway stops (cleanups run last first)
	s.g.batch.SetHooks(batchapi.Hooks{
		BeforeStep: func(b batch.Batch) {
			select {
			case st.steps <- b:
			case <-st.done:
				return
			}
			select {
			case <-st.proceed:
			case <-st.done:
			}
		},
		BeforeItem: func(batch.Claim) {
			select {
			case st.itemSeen <- struct{}{}:
			default:
			}
			select {
			case <-*st.items.Load():
			case <-st.done:
			}
		},
	})
	return st
}

// hold makes the items wait from now on; release lets them run.
func (st *stepper) hold() func() {
	ch := make(chan struct{})
	st.items.Store(&ch)
	select { // a signal of an earlier batch's items
	case <-st.itemSeen:
	default:
	}
	return func() { close(ch) }
}

// step waits for the API to be about to take batch id out of status.
func (st *stepper) step(t *testing.T, id string, status batch.Status) {
	t.Helper()
	select {
	case b := <-st.steps:
		if b.ID != id || b.Status != status {
			t.Fatalf("step of %s %s, want %s %s", b.ID, b.Status, id, status)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no step of %s %s", id, status)
	}
}

func (st *stepper) next() { st.proceed <- struct{}{} }

// running waits for an item to reach the gate.
func (st *stepper) running(t *testing.T) {
	t.Helper()
	select {
	case <-st.itemSeen:
	case <-time.After(30 * time.Second):
		t.Fatal("no item ran")
	}
}

func getBatch(t *testing.T, c openai.Client, id string) *openai.Batch {
	t.Helper()
	b, err := c.Batches.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// files0 is the id of the tenant's file of that name.
func files0(t *testing.T, c openai.Client, name string) string {
	t.Helper()
	page, err := c.Files.List(t.Context(), openai.FileListParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range page.Data {
		if f.Filename == name {
			return f.ID
		}
	}
	t.Fatalf("no file %s", name)
	return ""
}

func refusals(t *testing.T, s *served, code string) float64 {
	t.Helper()
	var m dto.Metric
	if err := s.g.metrics.badInput.WithLabelValues(code).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestBatchSDKConformance drives the whole Batch API with the official
// openai-go SDK (its own retries on) over loopback, against a gateway in
// front of sluice mock, and checks what OpenAI's API would answer: a good
// batch of 300 passes through validating, in_progress and finalizing to
// completed, with exact request_counts, model, usage summed from the
// answers, the provider's request ids and output_expires_after on its
// output file; a file with 3 bad lines among 300 ends failed with the 3
// listed; the list pages; a cancel goes cancelling → cancelled, and a
// second cancel is one 409 the SDK does not retry; files.list pages and
// files.delete deletes.
func TestBatchSDKConformance(t *testing.T) {
	mock, up := testkit.StartMock(t, mockllm.Config{Slots: 8, Median: 2 * time.Millisecond})
	s := serve(t, batchConfig(t, up.URL))
	st := newStepper(t, s)
	ctx := t.Context()
	var sent atomic.Int64 // requests the SDK sent, retries included
	acme := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey("sk-acme"),
		option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			sent.Add(1)
			return next(r)
		}))

	// A good batch.
	const n = 300
	f, err := acme.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(chatLines(n)), "good.jsonl", "application/jsonl"),
		Purpose: openai.FilePurposeBatch, ExpiresAfter: openai.FileNewParamsExpiresAfter{Seconds: 7200}})
	if err != nil {
		t.Fatal(err)
	}
	if f.ExpiresAt != f.CreatedAt+7200 || f.Status != "processed" {
		t.Fatalf("file %+v: want expires_at created_at+7200", f)
	}
	b, err := acme.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h, Metadata: shared.Metadata{"job": "nightly"},
		OutputExpiresAfter: openai.BatchNewParamsOutputExpiresAfter{Seconds: 3600}})
	if err != nil {
		t.Fatal(err)
	}
	if b.Status != openai.BatchStatusValidating || b.CompletionWindow != "24h" || b.ExpiresAt != b.CreatedAt+86400 || b.InProgressAt != 0 {
		t.Fatalf("created %+v", b)
	}
	id := b.ID
	st.step(t, id, batch.StatusValidating)
	if b = getBatch(t, acme, id); b.Status != openai.BatchStatusValidating {
		t.Fatalf("while validating: %s", b.Status)
	}
	release := st.hold()
	st.next()
	st.running(t)
	b = getBatch(t, acme, id)
	if b.Status != openai.BatchStatusInProgress || b.Model != "gpt-4o-mini" || b.RequestCounts.Total != n || b.InProgressAt == 0 || b.OutputFileID != "" {
		t.Fatalf("in progress: %+v", b)
	}
	release()
	st.step(t, id, batch.StatusFinalizing)
	b = getBatch(t, acme, id)
	if b.Status != openai.BatchStatusFinalizing || b.FinalizingAt == 0 || b.RequestCounts.Completed != n || b.OutputFileID != "" || b.CompletedAt != 0 {
		t.Fatalf("finalizing: %+v", b)
	}
	st.next()
	testkit.Eventually(t, "the batch to complete", func() bool { return getBatch(t, acme, id).Status == openai.BatchStatusCompleted })
	b = getBatch(t, acme, id)
	c := b.RequestCounts
	if c.Total != n || c.Completed != n || c.Failed != 0 || b.ErrorFileID != "" || b.CompletedAt < b.FinalizingAt || b.Errors.Data != nil {
		t.Fatalf("completed: %+v", b)
	}
	out, err := acme.Files.Get(ctx, b.OutputFileID)
	if err != nil || out.ExpiresAt != out.CreatedAt+3600 || out.Purpose != "batch_output" {
		t.Fatalf("output file %+v, %v: want expires_at created_at+3600 (output_expires_after)", out, err)
	}
	resp, err := acme.Files.Content(ctx, b.OutputFileID)
	if err != nil {
		t.Fatal(err)
	}
	var in, outTok int64
	ids := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var l struct {
			Response struct {
				RequestID string                `json:"request_id"`
				Body      openai.ChatCompletion `json:"body"`
			} `json:"response"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(l.Response.RequestID, "req_mock_") || ids[l.Response.RequestID] {
			t.Fatalf("request_id %q: want the provider's x-request-id, once", l.Response.RequestID)
		}
		ids[l.Response.RequestID] = true
		in += l.Response.Body.Usage.PromptTokens
		outTok += l.Response.Body.Usage.CompletionTokens
	}
	resp.Body.Close()
	u := b.Usage
	if len(ids) != n || u.InputTokens != in || u.OutputTokens != outTok || u.TotalTokens != in+outTok || in == 0 || outTok == 0 {
		t.Fatalf("usage %+v over %d lines; the answers sum to %d in, %d out", u, len(ids), in, outTok)
	}

	// Three bad lines among 300: the batch fails with the three listed.
	lines := strings.Split(strings.TrimSpace(chatLines(n)), "\n")
	lines[49] = `{"custom_id":"req-49","method":"POST",`
	lines[149] = strings.Replace(lines[149], `"req-149"`, `"req-10"`, 1)
	lines[249] = strings.Replace(lines[249], "/v1/chat/completions", "/v1/embeddings", 1)
	f, err = acme.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(strings.Join(lines, "\n")), "bad.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatalf("a file with bad lines is refused at upload: %v", err)
	}
	bad, err := acme.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: "24h"})
	if err != nil || bad.Status != openai.BatchStatusValidating {
		t.Fatalf("created %+v, %v", bad, err)
	}
	st.step(t, bad.ID, batch.StatusValidating)
	st.next()
	testkit.Eventually(t, "the batch to fail", func() bool { return getBatch(t, acme, bad.ID).Status == openai.BatchStatusFailed })
	bad = getBatch(t, acme, bad.ID)
	var got []string
	for _, e := range bad.Errors.Data {
		got = append(got, fmt.Sprintf("%d:%s:%s", e.Line, e.Code, e.Param))
	}
	if want := "[50:invalid_json_line: 150:duplicate_custom_id:custom_id 250:url_mismatch:url]"; fmt.Sprint(got) != want || bad.Errors.Object != "list" ||
		bad.FailedAt == 0 || bad.InProgressAt != 0 || bad.OutputFileID != "" || bad.RequestCounts.Total != 0 {
		t.Fatalf("failed with %v (%+v), want %s", got, bad, want)
	}

	// A cancel, then a second one: 409, not retried.
	f, err = acme.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(chatLines(40)), "c.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatal(err)
	}
	release = st.hold()
	cb, err := acme.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: "24h"})
	if err != nil {
		t.Fatal(err)
	}
	st.step(t, cb.ID, batch.StatusValidating)
	st.next()
	st.running(t)
	if cb, err = acme.Batches.Cancel(ctx, cb.ID); err != nil || cb.Status != openai.BatchStatusCancelling || cb.CancellingAt == 0 {
		t.Fatalf("cancel: %+v, %v", cb, err)
	}
	release()
	st.step(t, cb.ID, batch.StatusCancelling)
	st.next()
	testkit.Eventually(t, "the batch to be cancelled", func() bool { return getBatch(t, acme, cb.ID).Status == openai.BatchStatusCancelled })
	cb = getBatch(t, acme, cb.ID)
	if c := cb.RequestCounts; c.Total != 40 || c.Completed < 1 || c.Completed > 20 || c.Failed != 0 || cb.CancelledAt == 0 || cb.ErrorFileID == "" {
		t.Fatalf("cancelled: %+v", cb)
	}
	before, refused := sent.Load(), refusals(t, s, "batch_not_cancellable")
	_, err = acme.Batches.Cancel(ctx, cb.ID)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 409 || apiErr.Response.Header.Get("X-Should-Retry") != "false" {
		t.Fatalf("second cancel: %v, want 409 with x-should-retry: false", err)
	}
	if d, g := sent.Load()-before, refusals(t, s, "batch_not_cancellable")-refused; d != 1 || g != 1 {
		t.Fatalf("the second cancel was sent %d times, the gateway refused it %v times; want once (not retried)", d, g)
	}

	// The list, a page at a time: newest first, every batch once.
	var listed []string
	pager := acme.Batches.ListAutoPaging(ctx, openai.BatchListParams{Limit: openai.Int(1)})
	for pager.Next() {
		listed = append(listed, pager.Current().ID)
	}
	if err := pager.Err(); err != nil || fmt.Sprint(listed) != fmt.Sprint([]string{cb.ID, bad.ID, id}) {
		t.Fatalf("listed %v, %v; want %v", listed, err, []string{cb.ID, bad.ID, id})
	}
	page, err := acme.Batches.List(ctx, openai.BatchListParams{Limit: openai.Int(2)})
	if err != nil || len(page.Data) != 2 || !page.HasMore || page.Data[1].ID != bad.ID {
		t.Fatalf("first page of 2: %+v, %v", page, err)
	}

	// The files, listed a page at a time (the uploads, newest first; and
	// every file, the batches' outputs among them), and one deleted: gone
	// at once, and a second delete is a 404 the SDK does not retry.
	var files []string
	fpager := acme.Files.ListAutoPaging(ctx, openai.FileListParams{Limit: openai.Int(1), Purpose: openai.String("batch")})
	for fpager.Next() {
		files = append(files, fpager.Current().Filename)
	}
	if err := fpager.Err(); err != nil || fmt.Sprint(files) != "[c.jsonl bad.jsonl good.jsonl]" {
		t.Fatalf("files listed %v, %v", files, err)
	}
	all, err := acme.Files.List(ctx, openai.FileListParams{Order: openai.FileListParamsOrderAsc})
	var names []string
	for _, x := range all.Data {
		names = append(names, x.ID)
	}
	want := []string{files0(t, acme, "good.jsonl"), b.OutputFileID, files0(t, acme, "bad.jsonl"), f.ID, cb.OutputFileID, cb.ErrorFileID}
	if err != nil || fmt.Sprint(names) != fmt.Sprint(want) || all.HasMore {
		t.Fatalf("every file, oldest first: %v, %v; want %v", names, err, want)
	}
	del, err := acme.Files.Delete(ctx, f.ID)
	if err != nil || !del.Deleted || del.ID != f.ID || del.Object != "file" {
		t.Fatalf("delete: %+v, %v", del, err)
	}
	before = sent.Load()
	if _, err := acme.Files.Delete(ctx, f.ID); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || sent.Load()-before != 1 {
		t.Fatalf("second delete: %v in %d requests, want one 404", err, sent.Load()-before)
	}

	// OpenAI's refusals: completion_window other than 24h, a value quoted
	// once, an unknown parameter; none retried.
	before = sent.Load()
	_, err = acme.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: "/v1/bogus", CompletionWindow: "24h"})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "endpoint" || !strings.Contains(apiErr.Message, `endpoint: "/v1/bogus"`) {
		t.Fatalf("bogus endpoint: %v", err)
	}
	_, err = acme.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: "1h"})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "completion_window" {
		t.Fatalf("completion_window 1h: %v", err)
	}
	_, err = acme.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: "24h"},
		option.WithJSONSet("priority", "high"))
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "priority" || apiErr.Code != "unknown_parameter" {
		t.Fatalf("unknown parameter: %v", err)
	}
	if d := sent.Load() - before; d != 3 {
		t.Fatalf("3 refusals took %d requests", d)
	}
	if got := mock.Stats().Received; got < n+cb.RequestCounts.Completed {
		t.Errorf("the provider received %d calls", got)
	}
}
