package batchapi_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicehq/sluice/batch"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
	"github.com/sluicehq/sluice/spend"
	"github.com/sluicehq/sluice/store/redistest"
)

// paddedLines is n chat lines of about size bytes each.
func paddedLines(n, size int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"req-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"%s"}],"max_tokens":8}}`+"\n",
			i, strings.Repeat("x", size))
	}
	return b.String()
}

func newFile(t *testing.T, c openai.Client, content string) (*openai.FileObject, error) {
	t.Helper()
	return c.Files.New(t.Context(), openai.FileNewParams{File: openai.File(strings.NewReader(content), "in.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
}

// TestFileStreamedRoundTrip: a file several times the store's chunk (the
// most of it any step holds: batch.ChunkBytes) is uploaded with the SDK,
// comes back byte for byte, and a batch of it validates and starts — its
// lines read a line at a time from the chunks — on the bbolt store and on
// Redis.
func TestFileStreamedRoundTrip(t *testing.T) {
	content := paddedLines(40, 110000) // 4.4 MB: five chunks, the last partial
	if len(content) < 4*batch.ChunkBytes {
		t.Fatalf("content of %d bytes: want several chunks", len(content))
	}
	for _, st := range []string{"bolt", "redis"} {
		t.Run(st, func(t *testing.T) {
			_, up := testkit.StartMock(t, mockllm.Config{Slots: 8, Median: time.Millisecond})
			cfg := batchConfig(t, up.URL)
			cfg.Limits.MaxTimeout = config.Duration(5 * time.Second)
			if st == "redis" {
				rs := redistest.Start(t)
				cfg.Batch.Path = ""
				cfg.Store = &config.StoreConfig{Redis: &config.RedisStoreConfig{URL: rs.URL(), Cluster: strings.ReplaceAll(t.Name(), "/", "-"),
					Timeout: config.Duration(time.Second), Lease: &config.LeaseConfig{Disabled: true}}}
			}
			s := serve(t, cfg)
			acme := sdk(s.url, "sk-acme")
			f, err := newFile(t, acme, content)
			if err != nil {
				t.Fatal(err)
			}
			if f.Bytes != int64(len(content)) {
				t.Fatalf("file of %d bytes, want %d", f.Bytes, len(content))
			}
			resp, err := acme.Files.Content(t.Context(), f.ID)
			if err != nil {
				t.Fatal(err)
			}
			got := readAll(t, resp)
			if !bytes.Equal(got, []byte(content)) || resp.ContentLength != int64(len(content)) {
				t.Fatalf("content: %d bytes (Content-Length %d), want the %d uploaded", len(got), resp.ContentLength, len(content))
			}
			b, err := acme.Batches.New(t.Context(), openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
				CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
			if err != nil {
				t.Fatal(err)
			}
			// It validates (its lines read one at a time) and starts with
			// every line queued; cancelled, its output and error files hold
			// a line each, written a chunk at a time.
			testkit.Eventually(t, "the batch to start", func() bool {
				b, err = acme.Batches.Get(t.Context(), b.ID)
				return err == nil && b.Status != openai.BatchStatusValidating
			})
			if b.Status != openai.BatchStatusInProgress || b.RequestCounts.Total != 40 {
				t.Fatalf("batch %s with %+v, want in_progress with 40", b.Status, b.RequestCounts)
			}
			if _, err := acme.Batches.Cancel(t.Context(), b.ID); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, "the batch to be cancelled", func() bool {
				b, err = acme.Batches.Get(t.Context(), b.ID)
				return err == nil && b.Status == openai.BatchStatusCancelled
			})
			lines := 0
			for _, id := range []string{b.OutputFileID, b.ErrorFileID} {
				if id == "" {
					continue
				}
				resp, err = acme.Files.Content(t.Context(), id)
				if err != nil {
					t.Fatal(err)
				}
				out := readAll(t, resp)
				if int64(len(out)) != resp.ContentLength {
					t.Fatalf("file %s: %d bytes of Content-Length %d", id, len(out), resp.ContentLength)
				}
				lines += bytes.Count(out, []byte("\n"))
			}
			if lines != 40 {
				t.Fatalf("%d lines in the output and error files, want 40", lines)
			}
		})
	}
}

// TestFileRefusedMidway: a file found not to be UTF-8 past its first
// chunks, or over batch.max_file_bytes without a Content-Length to tell,
// is refused when the bytes show it, and nothing of it stays: the tenant's
// usage and listing are as before.
func TestFileRefusedMidway(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{Slots: 1})
	cfg := batchConfig(t, up.URL)
	cfg.Batch.MaxFileBytes = 5 << 19 // 2.5 MiB
	s := serve(t, cfg)
	acme := sdk(s.url, "sk-acme")
	good := paddedLines(400, 6000)[:2<<20]
	for _, tc := range []struct {
		name, content string
		status        int
		code          string
	}{
		{"not UTF-8", good + "\xff\n", 400, "invalid_file"},
		{"too large", good + good[:1<<20], 413, "file_too_large"}, // under the bound plus the form's allowance: read, then refused
	} {
		_, err := acme.Files.New(t.Context(), openai.FileNewParams{File: openai.File(strings.NewReader(tc.content), "in.jsonl", "application/jsonl"),
			Purpose: openai.FilePurposeBatch})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != tc.status || apiErr.Code != tc.code {
			t.Fatalf("%s: %v, want %d %s", tc.name, err, tc.status, tc.code)
		}
	}
	page, err := acme.Files.List(t.Context(), openai.FileListParams{})
	if err != nil || len(page.Data) != 0 {
		t.Fatalf("listed %d files after refusals, %v", len(page.Data), err)
	}
}

// TestFileQuotaListDelete: a tenant uploading in a loop reaches its count
// (429 too_many_files) or its bytes (413 file_storage_exceeded), OpenAI's
// error body each, while another tenant still uploads; the official SDK
// lists its files a page at a time (newest first, or oldest with order
// asc), and a delete gives its share of the quota back.
func TestFileQuotaListDelete(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{Slots: 1})
	cfg := batchConfig(t, up.URL)
	cfg.Batch.MaxTenantFiles = 3
	cfg.Batch.MaxTenantFileBytes = 64 << 10
	s := serve(t, cfg)
	acme, rival := sdk(s.url, "sk-acme"), sdk(s.url, "sk-rival")
	var ids []string
	for range 3 {
		f, err := newFile(t, acme, chatLines(2))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, f.ID)
	}
	_, err := newFile(t, acme, chatLines(2))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "too_many_files" || apiErr.Type != "rate_limit_error" ||
		!strings.Contains(apiErr.Message, "batch.max_tenant_files") {
		t.Fatalf("past the count: %v, want 429 too_many_files", err)
	}
	if _, err := newFile(t, rival, chatLines(2)); err != nil {
		t.Fatalf("another tenant's upload: %v", err)
	}

	// Listed with the SDK: newest first, a page at a time.
	page, err := acme.Files.List(t.Context(), openai.FileListParams{Limit: openai.Int(2)})
	if err != nil || len(page.Data) != 2 || page.Data[0].ID != ids[2] || page.Data[1].ID != ids[1] || !page.HasMore {
		t.Fatalf("first page %+v, %v", page, err)
	}
	var all []string
	iter := acme.Files.ListAutoPaging(t.Context(), openai.FileListParams{Limit: openai.Int(1), Order: openai.FileListParamsOrderAsc, Purpose: openai.String("batch")})
	for iter.Next() {
		all = append(all, iter.Current().ID)
	}
	if iter.Err() != nil || fmt.Sprint(all) != fmt.Sprint(ids) {
		t.Fatalf("every page, oldest first: %v, %v; want %v", all, iter.Err(), ids)
	}

	// Deleted: gone, and the quota has room again.
	del, err := acme.Files.Delete(t.Context(), ids[0])
	if err != nil || !del.Deleted || del.ID != ids[0] || del.Object != "file" {
		t.Fatalf("delete: %+v, %v", del, err)
	}
	if _, err := acme.Files.Get(t.Context(), ids[0]); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("deleted file: %v, want 404", err)
	}
	if _, err := rival.Files.Delete(t.Context(), ids[1]); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("another tenant's delete: %v, want 404", err)
	}
	if _, err := newFile(t, acme, chatLines(2)); err != nil {
		t.Fatalf("an upload after a delete: %v", err)
	}

	// The bytes: a file that would pass them is 413 — as soon as it
	// passes the room left, or before its body is read when its
	// Content-Length says so (past the room and the form's allowance).
	if _, err := acme.Files.Delete(t.Context(), ids[1]); err != nil {
		t.Fatal(err)
	}
	for _, content := range []string{paddedLines(20, 4000), paddedLines(300, 4000)} {
		_, err = newFile(t, acme, content)
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 413 || apiErr.Code != "file_storage_exceeded" ||
			!strings.Contains(apiErr.Message, "batch.max_tenant_file_bytes") {
			t.Fatalf("%d bytes past the room: %v, want 413 file_storage_exceeded", len(content), err)
		}
	}
	if _, err := newFile(t, acme, chatLines(2)); err != nil {
		t.Fatalf("a small file after the refusals: %v", err)
	}

	// A bad parameter of the list is named.
	req, _ := http.NewRequest(http.MethodGet, s.url+"/v1/files?order=sideways", nil)
	req.Header.Set("Authorization", "Bearer sk-acme")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		Error struct{ Code, Param string }
	}
	if json.Unmarshal(readAll(t, resp), &e); resp.StatusCode != 400 || e.Error.Param != "order" {
		t.Fatalf("order=sideways: %d %+v", resp.StatusCode, e)
	}
}

// TestLinesCheckedAsALiveCall: a batch whose lines name a model without a
// price (spend.unknown_model reject) or that no deployment serves, or carry
// a body over limits.max_body_bytes, fails while validating, each bad line listed with
// its number, before any item reaches the provider — as a live call with
// that body would be refused.
func TestLinesCheckedAsALiveCall(t *testing.T) {
	mock, up := testkit.StartMock(t, mockllm.Config{Slots: 1})
	cfg := batchConfig(t, up.URL)
	cfg.Limits.MaxBodyBytes = 4096
	cfg.Spend = &spend.Config{Prices: map[string]spend.Price{"gpt-4o-mini": {InputPerMTok: 0.15, OutputPerMTok: 0.6}}}
	s := serve(t, cfg)
	acme := sdk(s.url, "sk-acme")
	run := func(content string) *openai.Batch {
		t.Helper()
		f, err := newFile(t, acme, content)
		if err != nil {
			t.Fatal(err)
		}
		b, err := acme.Batches.New(t.Context(), openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
			CompletionWindow: openai.BatchNewParamsCompletionWindow24h}, option.WithMaxRetries(0))
		if err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, "the batch to validate", func() bool {
			b, err = acme.Batches.Get(t.Context(), b.ID)
			return err == nil && b.Status != openai.BatchStatusValidating
		})
		return b
	}
	faults := func(b *openai.Batch) string {
		var out []string
		for _, e := range b.Errors.Data {
			out = append(out, fmt.Sprintf("%d:%s:%s", e.Line, e.Code, e.Param))
		}
		return strings.Join(out, " ")
	}
	unpriced := strings.ReplaceAll(chatLines(3), "gpt-4o-mini", "gpt-unpriced")
	if b := run(unpriced); b.Status != openai.BatchStatusFailed || faults(b) != "1:model_not_priced:body.model 2:model_not_priced:body.model 3:model_not_priced:body.model" {
		t.Fatalf("unpriced model: %s %s", b.Status, faults(b))
	}
	big := chatLines(2) + strings.Replace(paddedLines(1, 5000), "req-0", "req-big", 1) + strings.Replace(chatLines(1), "req-0", "req-last", 1)
	if b := run(big); b.Status != openai.BatchStatusFailed || faults(b) != "3:body_too_large:body" ||
		!strings.Contains(b.Errors.Data[0].Message, "limits.max_body_bytes") {
		t.Fatalf("oversized line: %s %s", b.Status, faults(b))
	}
	if b := run(chatLines(2)); b.Status == openai.BatchStatusFailed {
		t.Fatalf("a good file failed: %s", faults(b))
	}
	if got := mock.Stats().Received; got > 2 {
		t.Fatalf("the provider received %d calls, want only the good batch's", got)
	}

	// A model no deployment serves, with upstreams: model_not_found.
	cfg = batchConfig(t, up.URL)
	cfg.Upstream = config.UpstreamConfig{}
	cfg.Admission.Concurrency = 0
	cfg.Upstreams = []config.DeploymentConfig{{Name: "east", URL: up.URL, APIKeyEnv: "TEST_PROVIDER_KEY", Concurrency: 4,
		Models: []config.ModelConfig{{Name: "gpt-4o-mini"}}}}
	acme = sdk(serve(t, cfg).url, "sk-acme")
	if b := run(strings.Replace(chatLines(2), "gpt-4o-mini", "gpt-elsewhere", 1)); b.Status != openai.BatchStatusFailed ||
		faults(b) != "1:model_not_found:body.model 2:model_mismatch:body.model" {
		t.Fatalf("unserved model: %s %s", b.Status, faults(b))
	}
}
