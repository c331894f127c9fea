package batchapi_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"

	"fmt"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
)

// The Batch API end to end: the openai-go SDK against a gateway with the
// API on (helpers_test.go), mockllm behind it.

func statusOf(err error) int {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		return apiErr.StatusCode
	}
	return 0
}

// TestBatchSDK: the openai-go SDK's files and batches APIs against the
// gateway, mockllm behind it: the upload, the batch, polling it to
// completed, the output (each custom_id once, the provider's answers); the
// provider got each item once. Another tenant sees none of it: 404s, an
// empty list.
func TestBatchSDK(t *testing.T) {
	mock, up := testkit.StartMock(t, mockllm.Config{Slots: 4, Median: 5 * time.Millisecond})
	s := serve(t, batchConfig(t, up.URL))
	ctx := t.Context()
	acme, rival := sdk(s.url, "sk-acme"), sdk(s.url, "sk-rival")

	const n = 25
	f, err := acme.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(chatLines(n)), "in.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatal(err)
	}
	if f.Purpose != "batch" || f.Bytes != int64(len(chatLines(n))) || f.Filename != "in.jsonl" || !strings.HasPrefix(f.ID, "file-") {
		t.Fatalf("file %+v", f)
	}
	b, err := acme.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h, Metadata: shared.Metadata{"job": "nightly"}})
	if err != nil {
		t.Fatal(err)
	}
	if b.Status != openai.BatchStatusValidating || b.Metadata["job"] != "nightly" || b.ExpiresAt-b.CreatedAt != 24*3600 {
		t.Fatalf("batch %+v", b)
	}
	deadline := time.Now().Add(30 * time.Second)
	for b.Status != openai.BatchStatusCompleted {
		if time.Now().After(deadline) {
			t.Fatalf("batch still %s: %+v", b.Status, b.RequestCounts)
		}
		time.Sleep(50 * time.Millisecond)
		if b, err = acme.Batches.Get(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
	}
	if b.RequestCounts.Total != n || b.RequestCounts.Completed != n || b.RequestCounts.Failed != 0 || b.OutputFileID == "" || b.ErrorFileID != "" || b.CompletedAt == 0 {
		t.Fatalf("completed %+v", b)
	}
	resp, err := acme.Files.Content(ctx, b.OutputFileID)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l struct {
			CustomID string `json:"custom_id"`
			Response struct {
				StatusCode int                   `json:"status_code"`
				Body       openai.ChatCompletion `json:"body"`
			} `json:"response"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		if seen[l.CustomID] || l.Response.StatusCode != 200 || len(l.Response.Body.Choices) == 0 || l.Response.Body.Usage.CompletionTokens != 8 {
			t.Fatalf("output line %s (seen before: %v)", sc.Text(), seen[l.CustomID])
		}
		seen[l.CustomID] = true
	}
	resp.Body.Close()
	if len(seen) != n {
		t.Fatalf("output has %d lines, want %d", len(seen), n)
	}
	if got := mock.Stats().Received; got != n {
		t.Errorf("the provider received %d calls for %d items", got, n)
	}
	if st := s.g.Gate().Stats(); st.InFlight != 0 || st.Queued != 0 {
		t.Errorf("after the batch: %d in flight, %d queued", st.InFlight, st.Queued)
	}

	list, err := acme.Batches.List(ctx, openai.BatchListParams{})
	if err != nil || len(list.Data) != 1 || list.Data[0].ID != b.ID {
		t.Fatalf("acme's list %+v, %v", list, err)
	}
	// The other tenant: every id is a 404, its list is empty.
	if _, err := rival.Batches.Get(ctx, b.ID); statusOf(err) != 404 {
		t.Errorf("rival's Batches.Get: %v, want 404", err)
	}
	if _, err := rival.Files.Get(ctx, f.ID); statusOf(err) != 404 {
		t.Errorf("rival's Files.Get: %v, want 404", err)
	}
	if _, err := rival.Files.Content(ctx, b.OutputFileID); statusOf(err) != 404 {
		t.Errorf("rival's Files.Content: %v, want 404", err)
	}
	if _, err := rival.Batches.Cancel(ctx, b.ID); statusOf(err) != 404 {
		t.Errorf("rival's Batches.Cancel: %v, want 404", err)
	}
	if _, err := rival.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h}); statusOf(err) != 404 {
		t.Errorf("rival's batch on acme's file: %v, want 404", err)
	}
	if list, err := rival.Batches.List(ctx, openai.BatchListParams{}); err != nil || len(list.Data) != 0 {
		t.Errorf("rival's list %+v, %v", list, err)
	}
	// rival may use only interactive, and is refused other classes: its
	// items run all the same, at the batch class.
	f2, err := rival.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(chatLines(2)), "r.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatal(err)
	}
	b2, err := rival.Batches.New(ctx, openai.BatchNewParams{InputFileID: f2.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: "24h"}, window("1h"))
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "rival's batch to end", func() bool {
		b2, err = rival.Batches.Get(ctx, b2.ID)
		return err == nil && b2.Status == openai.BatchStatusCompleted
	})
	if b2.RequestCounts.Completed != 2 {
		t.Errorf("rival's batch %+v", b2.RequestCounts)
	}
}

// upload posts a multipart file as tenant key, returning the status and
// the error body.
func upload(t *testing.T, url, key, purpose, content string) (int, string) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	if purpose != "" {
		_ = mw.WriteField("purpose", purpose)
	}
	fw, _ := mw.CreateFormFile("file", "in.jsonl")
	_, _ = io.WriteString(fw, content)
	mw.Close()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/files", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(readAll(t, resp))
}

func postJSON(t *testing.T, url, key, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(readAll(t, resp))
}

// TestBatchBadInput: a file that is not JSONL at all is a 400 at upload
// naming the part; a file with bad lines is stored, and a batch of it
// fails while validating with each bad line listed (code, line, param);
// a batch's bad parameters are a 400 naming the parameter, with
// x-should-retry: false; nothing runs.
func TestBatchBadInput(t *testing.T) {
	mock, up := testkit.StartMock(t, mockllm.Config{})
	cfg := batchConfig(t, up.URL)
	cfg.Batch.MaxFileBytes = 4096
	s := serve(t, cfg)
	ctx := t.Context()
	acme := sdk(s.url, "sk-acme")
	good := chatLines(3)
	lines := strings.Split(strings.TrimSpace(good), "\n")
	for _, tc := range []struct {
		name, purpose, content string
		code, param, want      string
	}{
		{"too large", "batch", strings.Repeat(good, 20), "file_too_large", "file", "batch.max_file_bytes (4096 bytes)"},
		{"wrong purpose", "fine-tune", good, "invalid_value", "purpose", `purpose: "fine-tune", want batch`},
		{"not JSONL", "batch", "custom_id,method,url\nreq-1,POST,/v1/chat/completions\n", "invalid_file", "file", "not JSONL"},
		{"empty", "batch", "\n\n", "invalid_file", "file", "no requests"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := upload(t, s.url, "sk-acme", tc.purpose, tc.content)
			var e struct {
				Error struct{ Message, Type, Code, Param string }
			}
			_ = json.Unmarshal([]byte(body), &e)
			wantStatus := 400
			if tc.code == "file_too_large" {
				wantStatus = 413
			}
			if status != wantStatus || e.Error.Code != tc.code || e.Error.Param != tc.param || e.Error.Type != "invalid_request_error" ||
				!strings.Contains(e.Error.Message, tc.want) || strings.Contains(e.Error.Message, `\\"`) {
				t.Fatalf("%d %s; want %d %s (param %s) with %q", status, body, wantStatus, tc.code, tc.param, tc.want)
			}
		})
	}
	// Bad lines: the batch fails, every line listed.
	bad := strings.Join([]string{
		lines[0],
		`{"custom_id":"x",`,
		strings.Replace(lines[1], "/v1/chat/completions", "/v1/fine_tuning/jobs", 1),
		lines[2],
		lines[0],
		`{"custom_id":"y","method":"POST","url":"/v1/chat/completions","body":{"model":"m","MODEL":"n"}}`,
		`{"custom_id":"s","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","stream":true}}`,
		`{"custom_id":"e","method":"POST","url":"/v1/embeddings","body":{"input":"x"}}`,
		`{"custom_id":"o","method":"POST","url":"/v1/chat/completions","body":{"model":"other","messages":[{"role":"user","content":"x"}]}}`,
	}, "\n")
	f, err := acme.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(bad), "bad.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatal(err)
	}
	b, err := acme.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: "24h"})
	if err != nil || b.Status != openai.BatchStatusValidating {
		t.Fatalf("batch of a file with bad lines: %+v, %v", b, err)
	}
	testkit.Eventually(t, "the batch to fail", func() bool {
		b, err = acme.Batches.Get(ctx, b.ID)
		return err == nil && b.Status == openai.BatchStatusFailed
	})
	var got []string
	for _, e := range b.Errors.Data {
		got = append(got, fmt.Sprintf("%d:%s:%s", e.Line, e.Code, e.Param))
	}
	want := "[2:invalid_json_line: 3:invalid_url:url 5:duplicate_custom_id:custom_id 6:invalid_request:body 7:invalid_value:body.stream 8:url_mismatch:url 9:model_mismatch:body.model]"
	if fmt.Sprint(got) != want || b.Errors.Object != "list" || b.FailedAt == 0 || b.InProgressAt != 0 || b.RequestCounts.Total != 0 {
		t.Fatalf("failed with %v (%+v), want %s", got, b, want)
	}
	if _, err := acme.Batches.Cancel(ctx, b.ID); statusOf(err) != 409 {
		t.Fatalf("cancel of a failed batch: %v, want 409", err)
	}

	status, body := upload(t, s.url, "sk-acme", "batch", good)
	if status != 200 {
		t.Fatalf("good file: %d %s", status, body)
	}
	_ = json.Unmarshal([]byte(body), &f)
	batchTests := []struct{ name, body, code, param, want string }{
		{"unknown endpoint", `{"input_file_id":"` + f.ID + `","endpoint":"/v1/images","completion_window":"24h"}`, "invalid_value", "endpoint", `endpoint: "/v1/images", want one of`},
		{"window not 24h", `{"input_file_id":"` + f.ID + `","endpoint":"/v1/chat/completions","completion_window":"1h"}`, "invalid_value", "completion_window", `completion_window: "1h", want 24h`},
		{"sluice window past max_window", `{"input_file_id":"` + f.ID + `","endpoint":"/v1/chat/completions","completion_window":"24h","sluice_completion_window":"200h"}`, "invalid_value", "sluice_completion_window", "batch.max_window"},
		{"no file", `{"endpoint":"/v1/chat/completions","completion_window":"24h"}`, "missing_required_parameter", "input_file_id", "input_file_id"},
		{"unknown parameter", `{"input_file_id":"` + f.ID + `","endpoint":"/v1/chat/completions","completion_window":"24h","priority":"high"}`, "unknown_parameter", "priority", `unknown parameter: "priority"`},
		{"wrong type", `{"input_file_id":"` + f.ID + `","endpoint":"/v1/chat/completions","completion_window":"24h","metadata":["x"]}`, "invalid_type", "metadata", "metadata"},
		{"output_expires_after too short", `{"input_file_id":"` + f.ID + `","endpoint":"/v1/chat/completions","completion_window":"24h","output_expires_after":{"anchor":"created_at","seconds":60}}`, "invalid_value", "output_expires_after.seconds", "3600..2592000"},
		{"output_expires_after anchor", `{"input_file_id":"` + f.ID + `","endpoint":"/v1/chat/completions","completion_window":"24h","output_expires_after":{"anchor":"completed_at","seconds":3600}}`, "invalid_value", "output_expires_after.anchor", `"completed_at", want created_at`},
		{"not JSON", `{`, "invalid_json", "", "not a JSON object"},
	}
	for _, tc := range batchTests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, s.url+"/v1/batches", strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer sk-acme")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(t, resp)
			var e struct {
				Error struct {
					Message, Code string
					Param         *string
				}
			}
			_ = json.Unmarshal(body, &e)
			param := ""
			if e.Error.Param != nil {
				param = *e.Error.Param
			}
			if resp.StatusCode != 400 || e.Error.Code != tc.code || param != tc.param || !strings.Contains(e.Error.Message, tc.want) ||
				strings.Contains(e.Error.Message, `\\"`) || resp.Header.Get("X-Should-Retry") != "false" {
				t.Fatalf("%d %s (x-should-retry %q); want 400 %s param %q with %q", resp.StatusCode, body, resp.Header.Get("X-Should-Retry"), tc.code, tc.param, tc.want)
			}
		})
	}
	// Another tenant's file is not found, never forbidden.
	if status, body := postJSON(t, s.url+"/v1/batches", "sk-rival", `{"input_file_id":"`+f.ID+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`); status != 404 {
		t.Fatalf("rival's batch on acme's file: %d %s", status, body)
	}
	// A method not served is a 405 on the tenant's own file, and a 404 on
	// another's, as for any id that is not theirs.
	for _, tc := range []struct {
		key    string
		status int
	}{{"sk-acme", 405}, {"sk-rival", 404}} {
		req, _ := http.NewRequest(http.MethodPut, s.url+"/v1/files/"+f.ID, nil)
		req.Header.Set("Authorization", "Bearer "+tc.key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if body := readAll(t, resp); resp.StatusCode != tc.status {
			t.Errorf("PUT with %s: %d %s, want %d", tc.key, resp.StatusCode, body, tc.status)
		}
	}
	if got := mock.Stats().Received; got != 0 {
		t.Fatalf("the provider received %d calls", got)
	}
	if n := metric(t, s.g, "sluice_batch_backlog_items", ""); n != 0 { // the store's backlog, read at the scrape
		t.Fatalf("backlog %v after refused files", n)
	}
}

// TestBatchExpiresAndCancels: a window too short for the provider expires
// the items left with batch_expired lines and exact counts; a cancel stops
// the queued items at once and ends the batch cancelled once the running
// ones are done.
func TestBatchExpiresAndCancels(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{Slots: 1, Median: 400 * time.Millisecond, Sigma: 0.01})
	cfg := batchConfig(t, up.URL)
	cfg.Admission.Concurrency = 1
	s := serve(t, cfg)
	ctx := t.Context()
	acme := sdk(s.url, "sk-acme")
	f, err := acme.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(chatLines(20)), "in.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatal(err)
	}
	b, err := acme.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: "24h"}, window("2s"))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !terminal(b.Status) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if b, err = acme.Batches.Get(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
	}
	c := b.RequestCounts
	if b.Status != openai.BatchStatusExpired || c.Total != 20 || c.Completed+c.Failed != 20 || c.Completed < 1 || c.Completed > 15 || b.ExpiredAt == 0 {
		t.Fatalf("batch %s %+v", b.Status, c)
	}
	resp, err := acme.Files.Content(ctx, b.ErrorFileID)
	if err != nil {
		t.Fatal(err)
	}
	errLines := strings.Split(strings.TrimSpace(string(readAll(t, resp))), "\n")
	if int64(len(errLines)) != c.Failed || !strings.Contains(errLines[0], `"code":"batch_expired"`) {
		t.Fatalf("%d error lines for %d failed: %s", len(errLines), c.Failed, errLines[0])
	}

	f, err = acme.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(chatLines(20)), "in.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatal(err)
	}
	if b, err = acme.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: "24h"}, window("1h")); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "an item to run", func() bool { return s.g.Gate().Stats().InFlight > 0 })
	if b, err = acme.Batches.Cancel(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if b.Status != openai.BatchStatusCancelling && b.Status != openai.BatchStatusCancelled {
		t.Fatalf("after cancel: %s", b.Status)
	}
	testkit.Eventually(t, "the batch to be cancelled", func() bool {
		b, err = acme.Batches.Get(ctx, b.ID)
		return err == nil && b.Status == openai.BatchStatusCancelled
	})
	if c := b.RequestCounts; c.Completed < 1 || c.Completed > 4 || c.Failed != 0 || b.ErrorFileID == "" {
		t.Fatalf("cancelled with %+v", c)
	}
	if _, err := acme.Batches.Cancel(ctx, b.ID); statusOf(err) != 409 {
		t.Fatalf("cancelling a cancelled batch: %v, want 409", err)
	}
}

func terminal(s openai.BatchStatus) bool {
	switch s {
	case openai.BatchStatusCompleted, openai.BatchStatusExpired, openai.BatchStatusCancelled, openai.BatchStatusFailed:
		return true
	}
	return false
}

// TestBatchRefusedWhenItCannotFinish: with a backlog running at the rate
// the slots leave, a batch whose window is shorter than the time to run
// the backlog and itself is refused at submission with 429, Retry-After
// and the estimate; one with room is accepted.
func TestBatchRefusedWhenItCannotFinish(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{Slots: 1, Median: 50 * time.Millisecond, Sigma: 0.01})
	cfg := batchConfig(t, up.URL)
	cfg.Admission.Concurrency = 1
	s := serve(t, cfg)
	ctx := t.Context()
	acme := sdk(s.url, "sk-acme")
	submit := func(n int, w string) (*openai.Batch, error) {
		f, err := acme.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(chatLines(n)), "in.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
		if err != nil {
			t.Fatal(err)
		}
		return acme.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: "24h"}, window(w))
	}
	first, err := submit(200, "1h")
	if err != nil {
		t.Fatal(err)
	}
	// The executor's rate is known once 10 items have ended over a second
	// at least (batch.Executor.Rate): 10 completed, and a second past the
	// first seen completed.
	var seen time.Time
	testkit.Eventually(t, "a rate to be observed", func() bool {
		n := metric(t, s.g, "sluice_batch_items_total", "completed")
		if n > 0 && seen.IsZero() {
			seen = time.Now()
		}
		return n >= 10 && !seen.IsZero() && time.Since(seen) >= time.Second
	})
	_, err = submit(100, "3s")
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "batch_cannot_finish" {
		t.Fatalf("a batch that cannot finish: %v", err)
	}
	resp := apiErr.Response
	var body struct {
		Error struct {
			EstimatedWaitMs int64 `json:"estimated_wait_ms"`
			RetryAfterMs    int64 `json:"retry_after_ms"`
		}
	}
	if err := json.Unmarshal([]byte(apiErr.RawJSON()), &body.Error); err != nil {
		t.Fatal(err)
	}
	// About 280 items at 1 slot ÷ 50 ms: ~14 s.
	if body.Error.EstimatedWaitMs < 5000 || body.Error.EstimatedWaitMs > 60000 || resp.Header.Get("Retry-After") == "" || body.Error.RetryAfterMs < 1000 {
		t.Fatalf("estimate %+v, Retry-After %q", body.Error, resp.Header.Get("Retry-After"))
	}
	if _, err := submit(5, "1h"); err != nil {
		t.Fatalf("a batch with room: %v", err)
	}
	if _, err := acme.Batches.Cancel(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
}

// TestBatchBacklogBounds: a tenant's backlog is bounded apart from the
// others' (429 with Retry-After past it), and a batch larger than the
// bound alone is a 400.
func TestBatchBacklogBounds(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{Slots: 1, Median: 500 * time.Millisecond, Sigma: 0.01})
	cfg := batchConfig(t, up.URL)
	cfg.Admission.Concurrency = 1
	cfg.Batch.MaxTenantBacklog = 30
	cfg.Tenants[1].Classes = nil
	s := serve(t, cfg)
	ctx := t.Context()
	submit := func(key string, n int) error {
		c := sdk(s.url, key)
		f, err := c.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(chatLines(n)), "in.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: "24h"}, window("1h"))
		return err
	}
	if err := submit("sk-acme", 20); err != nil {
		t.Fatal(err)
	}
	err := submit("sk-acme", 20)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "batch_backlog_full" ||
		!strings.Contains(apiErr.Message, "batch.max_tenant_backlog (30)") || apiErr.Response.Header.Get("Retry-After") == "" {
		t.Fatalf("past the tenant's bound: %v", err)
	}
	if err := submit("sk-rival", 20); err != nil {
		t.Fatalf("another tenant's batch: %v", err)
	}
	if err := submit("sk-rival", 31); !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "batch_too_large" {
		t.Fatalf("a batch larger than the bound: %v", err)
	}
}
