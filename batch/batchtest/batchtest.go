// Package batchtest is the shared test suite every batch.JobStore must
// pass: the embedded Bolt store today, a Redis Streams store next. It pins
// what the executor and the Batch API rely on — tenants see only their
// own, results are written once, claims lapse and are reclaimed, cancels
// and expiries end a batch with exact counts and files — so a new
// implementation is correct when it passes.
package batchtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/batch"
)

// t0 is the arbitrary instant the tests count from.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

var ctx = context.Background()

// Run runs the suite. newStore must return a new, empty store each time
// it is called (each subtest calls it once); it may use t for cleanup.
func Run(t *testing.T, newStore func(t *testing.T) batch.JobStore) {
	tests := []struct {
		name string
		f    func(t *testing.T, s batch.JobStore)
	}{
		{"FilesPerTenant", testFiles},
		{"CompletesInLineOrder", testComplete},
		{"ResultWrittenOnce", testOnce},
		{"ReleaseRequeues", testRelease},
		{"LapsedLeaseReclaimed", testLease},
		{"Cancel", testCancel},
		{"CancelledWhileRunning", testCancelRelease},
		{"Expire", testExpire},
		{"ListPerTenant", testList},
		{"TenantsTakeTurns", testOrder},
		{"Backlog", testBacklog},
		{"ConcurrentCompletes", testConcurrent},
		{"ValidatingThenStarted", testStart},
		{"ValidatingFailed", testFail},
		{"CancelledWhileValidating", testCancelValidating},
		{"UsageSummed", testUsage},
		{"FileExpiresAt", testFileExpiry},
		{"FileInChunks", testFileChunks},
		{"FileQuota", testQuota},
		{"FilesListed", testFilesList},
		{"FileDeleted", testFileDelete},
		{"Purge", testPurge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.f(t, newStore(t))
		})
	}
}

func reqs(n int) []batch.Request {
	out := make([]batch.Request, n)
	for i := range out {
		out[i] = batch.Request{CustomID: fmt.Sprintf("req-%d", i), Method: "POST", URL: "/v1/chat/completions",
			Body: json.RawMessage(fmt.Sprintf(`{"model":"m","n":%d}`, i))}
	}
	return out
}

func create(t *testing.T, s batch.JobStore, tenant, id string, n int, window time.Duration) batch.Batch {
	t.Helper()
	b := batch.Batch{ID: id, Tenant: tenant, Endpoint: "/v1/chat/completions", InputFileID: "file-in-" + id,
		CompletionWindow: window.String(), CreatedAt: t0, ExpiresAt: t0.Add(window), Metadata: map[string]string{"k": "v"}}
	if err := s.CreateBatch(ctx, b, reqs(n)); err != nil {
		t.Fatalf("CreateBatch: %v", err)
	}
	return get(t, s, tenant, id)
}

func get(t *testing.T, s batch.JobStore, tenant, id string) batch.Batch {
	t.Helper()
	b, err := s.Batch(ctx, tenant, id)
	if err != nil {
		t.Fatalf("Batch(%s, %s): %v", tenant, id, err)
	}
	return b
}

// finalize checks that the batch waits for Finalize (in Pending, with the
// status it settled in) and finalizes it at now.
func finalize(t *testing.T, s batch.JobStore, tenant, id string, settled batch.Status, now time.Time) batch.Batch {
	t.Helper()
	if b := get(t, s, tenant, id); b.Status != settled || b.OutputFileID != "" || b.ErrorFileID != "" {
		t.Fatalf("settled %+v, want %s without files", b, settled)
	}
	if !pending(t, s, id) {
		t.Fatalf("batch %s is not pending", id)
	}
	b, err := s.Finalize(ctx, tenant, id, now)
	if err != nil {
		t.Fatalf("Finalize: %v", err)
	}
	if pending(t, s, id) {
		t.Fatalf("batch %s is still pending after Finalize", id)
	}
	if _, err := s.Finalize(ctx, tenant, id, now); !errors.Is(err, batch.ErrConflict) {
		t.Fatalf("Finalize again: %v, want ErrConflict", err)
	}
	return b
}

func pending(t *testing.T, s batch.JobStore, id string) bool {
	t.Helper()
	list, err := s.Pending(ctx)
	if err != nil {
		t.Fatalf("Pending: %v", err)
	}
	for _, b := range list {
		if b.ID == id {
			return true
		}
	}
	return false
}

func claim(t *testing.T, s batch.JobStore, now time.Time, owner string, n int) []batch.Claim {
	t.Helper()
	cs, err := s.Claim(ctx, now, owner, time.Minute, n)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return cs
}

func succeed(t *testing.T, s batch.JobStore, c batch.Claim, now time.Time) bool {
	t.Helper()
	ok, err := s.Complete(ctx, c, batch.Result{Kind: batch.Succeeded, Line: batch.Line(c, 200, "req_x", []byte(`{"ok":true}`))}, now)
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	return ok
}

func content(t *testing.T, s batch.JobStore, tenant, id string) []map[string]any {
	t.Helper()
	if id == "" {
		return nil
	}
	raw, err := readFile(s, tenant, id)
	if err != nil {
		t.Fatalf("FileContent(%s): %v", id, err)
	}
	var out []map[string]any
	for l := range bytes.Lines(raw) {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("file %s: line %q: %v", id, l, err)
		}
		out = append(out, m)
	}
	return out
}

// readFile reads a file's content whole.
func readFile(s batch.JobStore, tenant, id string) ([]byte, error) {
	rc, err := s.FileContent(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func customIDs(lines []map[string]any) []string {
	var out []string
	for _, l := range lines {
		out = append(out, l["custom_id"].(string))
	}
	return out
}

func errorCode(l map[string]any) string {
	e, _ := l["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

func testFiles(t *testing.T, s batch.JobStore) {
	f := batch.File{ID: "file-1", Tenant: "a", Purpose: "batch", Filename: "in.jsonl", Bytes: 5, CreatedAt: t0}
	if err := batch.PutFile(ctx, s, f, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	got, err := s.File(ctx, "a", "file-1")
	if err != nil || got.Filename != "in.jsonl" || got.Bytes != 5 || !got.CreatedAt.Equal(t0) || got.Purpose != "batch" {
		t.Fatalf("File = %+v, %v", got, err)
	}
	if b, err := readFile(s, "a", "file-1"); err != nil || string(b) != "hello" {
		t.Fatalf("FileContent = %q, %v", b, err)
	}
	for _, c := range []struct{ tenant, id string }{{"b", "file-1"}, {"a", "file-2"}} {
		if _, err := s.File(ctx, c.tenant, c.id); !errors.Is(err, batch.ErrNotFound) {
			t.Errorf("File(%s, %s): %v, want ErrNotFound", c.tenant, c.id, err)
		}
		if _, err := s.FileContent(ctx, c.tenant, c.id); !errors.Is(err, batch.ErrNotFound) {
			t.Errorf("FileContent(%s, %s): %v, want ErrNotFound", c.tenant, c.id, err)
		}
	}
	if err := batch.PutFile(ctx, s, f, []byte("again")); err == nil {
		t.Error("PutFile over an existing id succeeded")
	}
}

func testComplete(t *testing.T, s batch.JobStore) {
	b := create(t, s, "a", "b1", 3, time.Hour)
	if b.Status != batch.StatusInProgress || b.Counts != (batch.Counts{Total: 3}) || b.Metadata["k"] != "v" || !b.ExpiresAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("created %+v", b)
	}
	cs := claim(t, s, t0, "w", 10)
	if len(cs) != 3 {
		t.Fatalf("claimed %d, want 3", len(cs))
	}
	for i, c := range cs {
		if c.Index != i || c.Tenant != "a" || c.Batch != "b1" || c.Request.CustomID != fmt.Sprintf("req-%d", i) || !c.Deadline.Equal(b.ExpiresAt) {
			t.Fatalf("claim %d = %+v", i, c)
		}
	}
	if more := claim(t, s, t0, "w", 10); len(more) != 0 {
		t.Fatalf("claimed %d more while all are claimed", len(more))
	}
	// Completed out of order; the output is in line order.
	for _, i := range []int{2, 0} {
		if !succeed(t, s, cs[i], t0) {
			t.Fatal("Complete: not written")
		}
	}
	if b = get(t, s, "a", "b1"); b.Status != batch.StatusInProgress || b.Counts.Completed != 2 {
		t.Fatalf("after 2 of 3: %+v", b)
	}
	fail := batch.Line(cs[1], 400, "req_y", []byte(`{"error":"bad"}`))
	if ok, err := s.Complete(ctx, cs[1], batch.Result{Kind: batch.Failed, Line: fail}, t0.Add(time.Second)); !ok || err != nil {
		t.Fatalf("Complete(failed) = %v, %v", ok, err)
	}
	if _, err := s.Finalize(ctx, "b", "b1", t0); !errors.Is(err, batch.ErrNotFound) {
		t.Fatalf("another tenant's Finalize: %v, want ErrNotFound", err)
	}
	b = finalize(t, s, "a", "b1", batch.StatusFinalizing, t0.Add(2*time.Second))
	if b.Status != batch.StatusCompleted || b.Counts != (batch.Counts{Total: 3, Completed: 2, Failed: 1}) ||
		!b.FinalizingAt.Equal(t0.Add(time.Second)) || !b.CompletedAt.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("ended %+v", b)
	}
	if got := customIDs(content(t, s, "a", b.OutputFileID)); fmt.Sprint(got) != "[req-0 req-2]" {
		t.Errorf("output custom_ids %v", got)
	}
	errs := content(t, s, "a", b.ErrorFileID)
	if len(errs) != 1 || errs[0]["custom_id"] != "req-1" || errs[0]["response"].(map[string]any)["status_code"] != 400.0 {
		t.Errorf("error file %v", errs)
	}
	if _, err := s.File(ctx, "b", b.OutputFileID); !errors.Is(err, batch.ErrNotFound) {
		t.Errorf("another tenant reads the output: %v", err)
	}
	if n, _, _ := s.Backlog(ctx, ""); n != 0 {
		t.Errorf("backlog %d after the end", n)
	}
}

func testOnce(t *testing.T, s batch.JobStore) {
	create(t, s, "a", "b1", 2, time.Hour)
	cs := claim(t, s, t0, "w", 2)
	if !succeed(t, s, cs[0], t0) {
		t.Fatal("first Complete not written")
	}
	if succeed(t, s, cs[0], t0) {
		t.Fatal("second Complete written")
	}
	succeed(t, s, cs[1], t0)
	b := finalize(t, s, "a", "b1", batch.StatusFinalizing, t0)
	if b.Counts.Completed != 2 {
		t.Fatalf("counts %+v", b.Counts)
	}
	if got := customIDs(content(t, s, "a", b.OutputFileID)); fmt.Sprint(got) != "[req-0 req-1]" {
		t.Errorf("output custom_ids %v", got)
	}
	if succeed(t, s, cs[1], t0) {
		t.Fatal("Complete after the end written")
	}
}

func testRelease(t *testing.T, s batch.JobStore) {
	create(t, s, "a", "b1", 1, time.Hour)
	c := claim(t, s, t0, "w", 1)[0]
	if err := s.Release(ctx, batch.Claim{Batch: c.Batch, Index: c.Index, Owner: "other"}, true, t0); err != nil {
		t.Fatal(err)
	}
	if again := claim(t, s, t0, "w", 1); len(again) != 0 {
		t.Fatal("a release by a non-owner requeued the item")
	}
	if err := s.Release(ctx, c, true, t0); err != nil {
		t.Fatal(err)
	}
	again := claim(t, s, t0, "w2", 1)
	if len(again) != 1 || again[0].Attempts != 1 || again[0].Owner != "w2" {
		t.Fatalf("reclaimed %+v", again)
	}
	if err := s.Release(ctx, again[0], false, t0); err != nil {
		t.Fatal(err)
	}
	if again = claim(t, s, t0, "w", 1); len(again) != 1 || again[0].Attempts != 1 {
		t.Fatalf("a release without an attempt counted one: %+v", again)
	}
}

func testLease(t *testing.T, s batch.JobStore) {
	create(t, s, "a", "b1", 1, time.Hour)
	first := claim(t, s, t0, "w1", 1)[0]
	if cs := claim(t, s, t0.Add(30*time.Second), "w2", 1); len(cs) != 0 {
		t.Fatal("claimed an item under a live lease")
	}
	cs := claim(t, s, t0.Add(2*time.Minute), "w2", 1)
	if len(cs) != 1 || cs[0].Index != first.Index || cs[0].Owner != "w2" {
		t.Fatalf("lapsed lease not reclaimed: %+v", cs)
	}
	// The first runner was slow, not dead: its answer is the one kept.
	if !succeed(t, s, first, t0.Add(2*time.Minute)) {
		t.Fatal("the first runner's result was not written")
	}
	if succeed(t, s, cs[0], t0.Add(2*time.Minute)) {
		t.Fatal("the reclaimed run's result was written too")
	}
	if b := finalize(t, s, "a", "b1", batch.StatusFinalizing, t0.Add(2*time.Minute)); b.Status != batch.StatusCompleted || len(content(t, s, "a", b.OutputFileID)) != 1 {
		t.Fatalf("ended %+v", b)
	}
}

func testCancel(t *testing.T, s batch.JobStore) {
	create(t, s, "a", "b1", 4, time.Hour)
	c := claim(t, s, t0, "w", 1)[0]
	if _, err := s.Cancel(ctx, "b", "b1", t0); !errors.Is(err, batch.ErrNotFound) {
		t.Fatalf("another tenant's cancel: %v, want ErrNotFound", err)
	}
	b, err := s.Cancel(ctx, "a", "b1", t0.Add(time.Second))
	if err != nil || b.Status != batch.StatusCancelling || b.Cancelled != 3 || !b.CancellingAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("Cancel = %+v, %v", b, err)
	}
	if b, err = s.Cancel(ctx, "a", "b1", t0.Add(time.Second)); err != nil || b.Status != batch.StatusCancelling {
		t.Fatalf("Cancel again = %+v, %v", b, err)
	}
	if cs := claim(t, s, t0, "w", 10); len(cs) != 0 {
		t.Fatalf("claimed %d items of a cancelled batch", len(cs))
	}
	succeed(t, s, c, t0.Add(2*time.Second))
	b = finalize(t, s, "a", "b1", batch.StatusCancelling, t0.Add(2*time.Second))
	if b.Status != batch.StatusCancelled || b.Counts != (batch.Counts{Total: 4, Completed: 1}) || !b.CancelledAt.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("ended %+v", b)
	}
	if got := customIDs(content(t, s, "a", b.OutputFileID)); fmt.Sprint(got) != "[req-0]" {
		t.Errorf("output %v", got)
	}
	errs := content(t, s, "a", b.ErrorFileID)
	if len(errs) != 3 || errorCode(errs[0]) != "batch_cancelled" {
		t.Errorf("error file %v", errs)
	}
	if _, err := s.Cancel(ctx, "a", "b1", t0); !errors.Is(err, batch.ErrConflict) {
		t.Errorf("cancel of a cancelled batch: %v, want ErrConflict", err)
	}
}

func testCancelRelease(t *testing.T, s batch.JobStore) {
	create(t, s, "a", "b1", 2, time.Hour)
	cs := claim(t, s, t0, "w", 2)
	if _, err := s.Cancel(ctx, "a", "b1", t0); err != nil {
		t.Fatal(err)
	}
	// Deferred after the cancel: it does not run again.
	if err := s.Release(ctx, cs[0], false, t0); err != nil {
		t.Fatal(err)
	}
	if more := claim(t, s, t0, "w", 2); len(more) != 0 {
		t.Fatal("a released item of a cancelled batch was claimed again")
	}
	succeed(t, s, cs[1], t0)
	if b := finalize(t, s, "a", "b1", batch.StatusCancelling, t0); b.Status != batch.StatusCancelled || b.Counts.Completed != 1 || b.Cancelled != 1 {
		t.Fatalf("ended %+v", b)
	}
}

func testExpire(t *testing.T, s batch.JobStore) {
	create(t, s, "a", "b1", 3, time.Hour)
	cs := claim(t, s, t0, "w", 2)
	succeed(t, s, cs[0], t0)
	if n, err := s.ExpireDue(ctx, t0.Add(time.Hour-time.Nanosecond)); n != 0 || err != nil {
		t.Fatalf("ExpireDue before the window = %d, %v", n, err)
	}
	end := t0.Add(time.Hour)
	if n, err := s.ExpireDue(ctx, end); n != 2 || err != nil {
		t.Fatalf("ExpireDue = %d, %v; want 2 (one claimed, one queued)", n, err)
	}
	b := finalize(t, s, "a", "b1", batch.StatusFinalizing, end)
	if b.Status != batch.StatusExpired || b.Counts != (batch.Counts{Total: 3, Completed: 1, Failed: 2}) || !b.ExpiredAt.Equal(end) {
		t.Fatalf("expired %+v", b)
	}
	errs := content(t, s, "a", b.ErrorFileID)
	if fmt.Sprint(customIDs(errs)) != "[req-1 req-2]" || errorCode(errs[0]) != "batch_expired" {
		t.Errorf("error file %v", errs)
	}
	if succeed(t, s, cs[1], end) {
		t.Error("a result after the expiry was written")
	}
	if n, _ := s.ExpireDue(ctx, end.Add(time.Hour)); n != 0 {
		t.Errorf("expired %d again", n)
	}

	// A runner that finds an item past the window expires it; when that is
	// the batch's last result, the batch has expired too.
	create(t, s, "a", "b2", 2, time.Hour)
	cs = claim(t, s, t0, "w", 2)
	succeed(t, s, cs[0], t0)
	line := batch.ErrorLine("b2", 1, "req-1", "batch_expired", "too late")
	if ok, err := s.Complete(ctx, cs[1], batch.Result{Kind: batch.Expired, Line: line}, end); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if b := finalize(t, s, "a", "b2", batch.StatusFinalizing, end); b.Status != batch.StatusExpired || b.Counts != (batch.Counts{Total: 2, Completed: 1, Failed: 1}) || !b.ExpiredAt.Equal(end) {
		t.Fatalf("expired by its runner: %+v", b)
	}
}

func testList(t *testing.T, s batch.JobStore) {
	for _, id := range []string{"b1", "b2", "b3"} {
		create(t, s, "a", id, 1, time.Hour)
	}
	create(t, s, "ab", "x1", 1, time.Hour) // a tenant whose name has "a" as a prefix
	ids := func(bs []batch.Batch) string {
		var out []string
		for _, b := range bs {
			out = append(out, b.ID)
		}
		return fmt.Sprint(out)
	}
	list, more, err := s.Batches(ctx, "a", "", 2)
	if err != nil || ids(list) != "[b3 b2]" || !more {
		t.Fatalf("first page %s more=%v err=%v", ids(list), more, err)
	}
	if list, more, err = s.Batches(ctx, "a", "b2", 2); err != nil || ids(list) != "[b1]" || more {
		t.Fatalf("second page %s more=%v err=%v", ids(list), more, err)
	}
	if list, _, _ = s.Batches(ctx, "ab", "", 10); ids(list) != "[x1]" {
		t.Fatalf("tenant ab sees %s", ids(list))
	}
	if list, _, _ = s.Batches(ctx, "c", "", 10); len(list) != 0 {
		t.Fatalf("tenant c sees %s", ids(list))
	}
	if _, _, err = s.Batches(ctx, "ab", "b1", 10); !errors.Is(err, batch.ErrNotFound) {
		t.Fatalf("after another tenant's batch: %v, want ErrNotFound", err)
	}
	if _, err := s.Batch(ctx, "ab", "b1"); !errors.Is(err, batch.ErrNotFound) {
		t.Fatalf("another tenant's batch: %v, want ErrNotFound", err)
	}
}

func testOrder(t *testing.T, s batch.JobStore) {
	create(t, s, "a", "first", 3, time.Hour)
	create(t, s, "b", "second", 2, time.Hour)
	create(t, s, "a", "third", 1, time.Hour)
	var got []string
	for _, n := range []int{3, 1, 4} { // the turns carry from one claim to the next
		for _, c := range claim(t, s, t0, "w", n) {
			got = append(got, fmt.Sprintf("%s/%d", c.Batch, c.Index))
		}
	}
	if want := "[first/0 second/0 first/1 second/1 first/2 third/0]"; fmt.Sprint(got) != want {
		t.Fatalf("claim order %v, want %s: tenants in turn, each one's oldest batch first", got, want)
	}
}

func testBacklog(t *testing.T, s batch.JobStore) {
	create(t, s, "a", "b1", 3, time.Hour)
	n, size, err := s.Backlog(ctx, "")
	if err != nil || n != 3 || size <= 0 {
		t.Fatalf("Backlog = %d, %d, %v", n, size, err)
	}
	cs := claim(t, s, t0, "w", 1)
	if n, _, _ = s.Backlog(ctx, ""); n != 3 {
		t.Fatalf("Backlog with one claimed = %d, want 3", n)
	}
	succeed(t, s, cs[0], t0)
	if n, _, _ = s.Backlog(ctx, ""); n != 2 {
		t.Fatalf("Backlog after one result = %d, want 2", n)
	}
	create(t, s, "b", "b2", 4, time.Hour)
	for _, c := range []struct {
		tenant string
		n      int
		bytes  int64
	}{{"", 6, 6 * int64(len(`{"model":"m","n":0}`))}, {"a", 2, 2 * int64(len(`{"model":"m","n":0}`))}, {"b", 4, 4 * int64(len(`{"model":"m","n":0}`))}, {"c", 0, 0}} {
		if n, size, err := s.Backlog(ctx, c.tenant); n != c.n || size != c.bytes || err != nil {
			t.Errorf("Backlog(%q) = %d, %d, %v; want %d, %d", c.tenant, n, size, err, c.n, c.bytes)
		}
	}
}

func testConcurrent(t *testing.T, s batch.JobStore) {
	const n = 64
	create(t, s, "a", "b1", n, time.Hour)
	cs := claim(t, s, t0, "w", n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	written := 0
	for _, c := range cs {
		for range 2 { // every item completed twice, at once
			wg.Go(func() {
				ok, err := s.Complete(ctx, c, batch.Result{Kind: batch.Succeeded, Line: batch.Line(c, 200, "", []byte(`{}`))}, t0)
				if err != nil {
					t.Error(err)
				}
				if ok {
					mu.Lock()
					written++
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	b := finalize(t, s, "a", "b1", batch.StatusFinalizing, t0)
	if written != n || b.Status != batch.StatusCompleted || b.Counts.Completed != n || len(content(t, s, "a", b.OutputFileID)) != n {
		t.Fatalf("written %d; %+v", written, b)
	}
}

// createValidating creates a validating batch, as the Batch API does.
func createValidating(t *testing.T, s batch.JobStore, tenant, id string) batch.Batch {
	t.Helper()
	b := batch.Batch{ID: id, Tenant: tenant, Endpoint: "/v1/chat/completions", InputFileID: "file-in-" + id, Status: batch.StatusValidating,
		CompletionWindow: "24h", CreatedAt: t0, ExpiresAt: t0.Add(24 * time.Hour), OutputExpiresAfter: 2 * time.Hour, Lines: 2, LineBytes: 40}
	if err := s.CreateBatch(ctx, b, nil); err != nil {
		t.Fatalf("CreateBatch(validating): %v", err)
	}
	return get(t, s, tenant, id)
}

func testStart(t *testing.T, s batch.JobStore) {
	b := createValidating(t, s, "a", "v1")
	if b.Status != batch.StatusValidating || b.Counts.Total != 0 || !b.InProgressAt.IsZero() || !pending(t, s, "v1") {
		t.Fatalf("created %+v", b)
	}
	if list, _, _ := s.Batches(ctx, "a", "", 10); len(list) != 1 || list[0].ID != "v1" {
		t.Fatalf("listed %+v", list)
	}
	if cs := claim(t, s, t0, "w", 10); len(cs) != 0 {
		t.Fatalf("claimed %d items of a validating batch", len(cs))
	}
	// Its file's lines are its share of the backlog until it starts.
	if n, size, err := s.Backlog(ctx, "a"); n != 2 || size != 40 || err != nil {
		t.Fatalf("Backlog while validating = %d, %d, %v; want 2, 40", n, size, err)
	}
	if n, _ := s.ExpireDue(ctx, t0.Add(48*time.Hour)); n != 0 {
		t.Fatalf("expired %d items of a validating batch", n)
	}
	if err := s.Start(ctx, "b", "v1", "m", batch.Slice(reqs(2)), t0); !errors.Is(err, batch.ErrNotFound) {
		t.Fatalf("another tenant's Start: %v, want ErrNotFound", err)
	}
	at := t0.Add(time.Second)
	if err := s.Start(ctx, "a", "v1", "gpt-x", batch.Slice(reqs(2)), at); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := s.Start(ctx, "a", "v1", "gpt-x", batch.Slice(reqs(2)), at); !errors.Is(err, batch.ErrConflict) {
		t.Fatalf("Start again: %v, want ErrConflict", err)
	}
	if err := s.Fail(ctx, "a", "v1", nil, at); !errors.Is(err, batch.ErrConflict) {
		t.Fatalf("Fail after Start: %v, want ErrConflict", err)
	}
	b = get(t, s, "a", "v1")
	if b.Status != batch.StatusInProgress || b.Model != "gpt-x" || b.Counts.Total != 2 || !b.InProgressAt.Equal(at) || pending(t, s, "v1") {
		t.Fatalf("started %+v", b)
	}
	cs := claim(t, s, at, "w", 10)
	if len(cs) != 2 {
		t.Fatalf("claimed %d, want 2", len(cs))
	}
	succeed(t, s, cs[0], at)
	succeed(t, s, cs[1], at)
	end := t0.Add(time.Minute)
	b = finalize(t, s, "a", "v1", batch.StatusFinalizing, end)
	f, err := s.File(ctx, "a", b.OutputFileID)
	if err != nil || !f.ExpiresAt.Equal(end.Add(2*time.Hour)) || !f.CreatedAt.Equal(end) {
		t.Fatalf("output file %+v, %v: want expires_at its created_at + output_expires_after", f, err)
	}
}

func testFail(t *testing.T, s batch.JobStore) {
	createValidating(t, s, "a", "v1")
	errs := []batch.LineError{{Code: "invalid_json_line", Line: 3, Message: "not JSON"}, {Code: "duplicate_custom_id", Line: 7, Message: "dup", Param: "custom_id"}}
	if err := s.Fail(ctx, "b", "v1", errs, t0); !errors.Is(err, batch.ErrNotFound) {
		t.Fatalf("another tenant's Fail: %v, want ErrNotFound", err)
	}
	at := t0.Add(time.Second)
	if err := s.Fail(ctx, "a", "v1", errs, at); err != nil {
		t.Fatalf("Fail: %v", err)
	}
	b := get(t, s, "a", "v1")
	if b.Status != batch.StatusFailed || !b.FailedAt.Equal(at) || fmt.Sprint(b.Errors) != fmt.Sprint(errs) || pending(t, s, "v1") {
		t.Fatalf("failed %+v", b)
	}
	if err := s.Start(ctx, "a", "v1", "m", batch.Slice(reqs(1)), at); !errors.Is(err, batch.ErrConflict) {
		t.Fatalf("Start after Fail: %v, want ErrConflict", err)
	}
	if _, err := s.Cancel(ctx, "a", "v1", at); !errors.Is(err, batch.ErrConflict) {
		t.Fatalf("Cancel of a failed batch: %v, want ErrConflict", err)
	}
	if n, _, _ := s.Backlog(ctx, ""); n != 0 {
		t.Fatalf("backlog %d", n)
	}
}

func testCancelValidating(t *testing.T, s batch.JobStore) {
	createValidating(t, s, "a", "v1")
	b, err := s.Cancel(ctx, "a", "v1", t0)
	if err != nil || b.Status != batch.StatusCancelling {
		t.Fatalf("Cancel = %+v, %v", b, err)
	}
	if err := s.Start(ctx, "a", "v1", "m", batch.Slice(reqs(1)), t0); !errors.Is(err, batch.ErrConflict) {
		t.Fatalf("Start after Cancel: %v, want ErrConflict", err)
	}
	if b = finalize(t, s, "a", "v1", batch.StatusCancelling, t0); b.Status != batch.StatusCancelled || b.Counts.Total != 0 {
		t.Fatalf("ended %+v", b)
	}
}

func testUsage(t *testing.T, s batch.JobStore) {
	create(t, s, "a", "b1", 3, time.Hour)
	cs := claim(t, s, t0, "w", 3)
	for i, c := range cs {
		u := batch.Usage{InputTokens: 10, OutputTokens: int64(i + 1), CachedTokens: 2, ReasoningTokens: 1}
		if ok, err := s.Complete(ctx, c, batch.Result{Kind: batch.Succeeded, Line: batch.Line(c, 200, "", []byte(`{}`)), Usage: u}, t0); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	// A second result is not written, nor counted.
	s.Complete(ctx, cs[0], batch.Result{Kind: batch.Succeeded, Line: []byte(`{}`), Usage: batch.Usage{InputTokens: 1000}}, t0)
	if b := get(t, s, "a", "b1"); b.Usage != (batch.Usage{InputTokens: 30, OutputTokens: 6, CachedTokens: 6, ReasoningTokens: 3}) {
		t.Fatalf("usage %+v", b.Usage)
	}
}

func testFileExpiry(t *testing.T, s batch.JobStore) {
	f := batch.File{ID: "file-1", Tenant: "a", Purpose: "batch", Filename: "in.jsonl", Bytes: 2, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	if err := batch.PutFile(ctx, s, f, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	got, err := s.File(ctx, "a", "file-1")
	if err != nil || !got.ExpiresAt.Equal(t0.Add(time.Hour)) || got.Expired(t0.Add(time.Hour-1)) || !got.Expired(t0.Add(time.Hour)) {
		t.Fatalf("File = %+v, %v", got, err)
	}
}

// A file of several chunks, staged from a reader a chunk at a time, is
// not seen until it is committed, and reads back byte for byte; staging
// that fails reading, or is aborted, leaves nothing.
func testFileChunks(t *testing.T, s batch.JobStore) {
	big := make([]byte, 3*batch.ChunkBytes+12345)
	for i := range big {
		big[i] = byte('a' + i%26)
	}
	n, err := s.StageFile(ctx, "file-big", bytes.NewReader(big))
	if err != nil || n != int64(len(big)) {
		t.Fatalf("StageFile = %d, %v", n, err)
	}
	if _, err := s.File(ctx, "a", "file-big"); !errors.Is(err, batch.ErrNotFound) {
		t.Fatalf("a staged file is seen: %v", err)
	}
	f := batch.File{ID: "file-big", Tenant: "a", Purpose: "batch", Filename: "big.jsonl", Bytes: n, CreatedAt: t0}
	if err := s.CommitFile(ctx, f, batch.Quota{}); err != nil {
		t.Fatal(err)
	}
	if got, err := readFile(s, "a", "file-big"); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("content: %d bytes, %v; want %d the same", len(got), err, len(big))
	}
	if err := s.CommitFile(ctx, f, batch.Quota{}); err == nil {
		t.Fatal("a second commit succeeded")
	}
	// A reader that fails: its error comes back, nothing stays.
	boom := errors.New("boom")
	if _, err := s.StageFile(ctx, "file-bad", io.MultiReader(bytes.NewReader(big[:batch.ChunkBytes+1]), errReader{boom})); !errors.Is(err, boom) {
		t.Fatalf("StageFile of a failing reader: %v, want its error", err)
	}
	if err := s.CommitFile(ctx, batch.File{ID: "file-bad", Tenant: "a", Purpose: "batch", CreatedAt: t0}, batch.Quota{}); err == nil {
		t.Fatal("committed a file whose staging failed")
	}
	// A reader cut short (a multipart part without its closing boundary
	// says io.ErrUnexpectedEOF) is a failure, not a short last chunk.
	if _, err := s.StageFile(ctx, "file-cut", io.MultiReader(strings.NewReader("abc"), errReader{io.ErrUnexpectedEOF})); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("StageFile of a reader cut short: %v, want io.ErrUnexpectedEOF", err)
	}
	if _, err := s.StageFile(ctx, "file-ab", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	if err := s.AbortFile(ctx, "file-ab"); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitFile(ctx, batch.File{ID: "file-ab", Tenant: "a", Purpose: "batch", CreatedAt: t0}, batch.Quota{}); err == nil {
		t.Fatal("committed an aborted file")
	}
	if n, size, _ := s.FileUsage(ctx, "a"); n != 1 || size != int64(len(big)) {
		t.Fatalf("usage %d files, %d bytes", n, size)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

func put(t *testing.T, s batch.JobStore, tenant, id, content string, at time.Time, q batch.Quota) error {
	t.Helper()
	n, err := s.StageFile(ctx, id, strings.NewReader(content))
	if err != nil {
		t.Fatal(err)
	}
	err = s.CommitFile(ctx, batch.File{ID: id, Tenant: tenant, Purpose: "batch", Filename: id, Bytes: n, CreatedAt: at}, q)
	if err != nil {
		_ = s.AbortFile(ctx, id)
	}
	return err
}

// The quota bounds a tenant's count of files and their bytes, each
// tenant's own; a deleted file gives its share back.
func testQuota(t *testing.T, s batch.JobStore) {
	q := batch.Quota{MaxFiles: 2, MaxBytes: 10}
	for i, c := range []string{"1234", "5678"} {
		if err := put(t, s, "a", fmt.Sprintf("file-%d", i), c, t0, q); err != nil {
			t.Fatal(err)
		}
	}
	var qe *batch.QuotaError
	if err := put(t, s, "a", "file-x", "9", t0, q); !errors.As(err, &qe) || qe.Bytes || qe.Used != 2 || qe.Max != 2 {
		t.Fatalf("third file: %v, want the count's QuotaError", err)
	}
	if err := put(t, s, "b", "file-b", "0123456789", t0, q); err != nil {
		t.Fatalf("another tenant's file: %v", err)
	}
	if err := s.DeleteFile(ctx, "a", "file-1"); err != nil {
		t.Fatal(err)
	}
	if err := put(t, s, "a", "file-y", "0123456", t0, q); !errors.As(err, &qe) || !qe.Bytes || qe.Used != 4 || qe.Max != 10 {
		t.Fatalf("past the bytes: %v, want the bytes' QuotaError", err)
	}
	if err := put(t, s, "a", "file-z", "012345", t0, q); err != nil {
		t.Fatalf("up to the bytes: %v", err)
	}
	if n, size, err := s.FileUsage(ctx, "a"); n != 2 || size != 10 || err != nil {
		t.Fatalf("usage %d, %d, %v", n, size, err)
	}
}

// Files lists a tenant's files newest first (or oldest), by purpose, in
// pages.
func testFilesList(t *testing.T, s batch.JobStore) {
	for i := range 5 {
		if err := put(t, s, "a", fmt.Sprintf("file-%d", i), "{}", t0.Add(time.Duration(i)*time.Second), batch.Quota{}); err != nil {
			t.Fatal(err)
		}
	}
	put(t, s, "b", "file-b", "{}", t0, batch.Quota{})
	ids := func(list []batch.File) string {
		var out []string
		for _, f := range list {
			out = append(out, f.ID)
		}
		return strings.Join(out, ",")
	}
	list, more, err := s.Files(ctx, "a", "", "", 2, false)
	if err != nil || more != true || ids(list) != "file-4,file-3" {
		t.Fatalf("first page %s, %v, %v", ids(list), more, err)
	}
	list, more, _ = s.Files(ctx, "a", "batch", "file-3", 10, false)
	if more || ids(list) != "file-2,file-1,file-0" {
		t.Fatalf("after file-3: %s, %v", ids(list), more)
	}
	list, more, _ = s.Files(ctx, "a", "", "file-1", 2, true)
	if !more || ids(list) != "file-2,file-3" {
		t.Fatalf("ascending after file-1: %s, %v", ids(list), more)
	}
	if list, _, _ = s.Files(ctx, "a", "batch_output", "", 10, false); len(list) != 0 {
		t.Fatalf("batch_output: %s", ids(list))
	}
	if _, _, err := s.Files(ctx, "a", "", "file-b", 10, false); !errors.Is(err, batch.ErrNotFound) {
		t.Fatalf("after another tenant's file: %v", err)
	}
	if list, _, _ = s.Files(ctx, "b", "", "", 10, false); ids(list) != "file-b" {
		t.Fatalf("b's: %s", ids(list))
	}
}

// A deleted file is gone, content and listing; only its tenant deletes it.
func testFileDelete(t *testing.T, s batch.JobStore) {
	put(t, s, "a", "file-1", strings.Repeat("x", batch.ChunkBytes+1), t0, batch.Quota{})
	if err := s.DeleteFile(ctx, "b", "file-1"); !errors.Is(err, batch.ErrNotFound) {
		t.Fatalf("another tenant's delete: %v", err)
	}
	rc, err := s.FileContent(ctx, "a", "file-1")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if err := s.DeleteFile(ctx, "a", "file-1"); err != nil {
		t.Fatal(err)
	}
	// A read begun before the delete ends with ErrNotFound, not a short
	// file that looks whole.
	if _, err := io.ReadAll(rc); !errors.Is(err, batch.ErrNotFound) {
		t.Fatalf("read across the delete: %v, want ErrNotFound", err)
	}
	if _, err := s.File(ctx, "a", "file-1"); !errors.Is(err, batch.ErrNotFound) {
		t.Fatalf("File after delete: %v", err)
	}
	if err := s.DeleteFile(ctx, "a", "file-1"); !errors.Is(err, batch.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if list, _, _ := s.Files(ctx, "a", "", "", 10, false); len(list) != 0 {
		t.Fatalf("listed %d after delete", len(list))
	}
	if n, size, _ := s.FileUsage(ctx, "a"); n != 0 || size != 0 {
		t.Fatalf("usage %d, %d after delete", n, size)
	}
}

// Purge deletes the files past their expiry and the batches ended more
// than the retention ago, with their output files; nothing before.
func testPurge(t *testing.T, s batch.JobStore) {
	f := batch.File{ID: "file-exp", Tenant: "a", Purpose: "batch", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	if err := batch.PutFile(ctx, s, f, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	put(t, s, "a", "file-keep", "{}", t0, batch.Quota{})
	create(t, s, "a", "b1", 1, time.Hour)
	cs := claim(t, s, t0, "w", 1)
	succeed(t, s, cs[0], t0)
	b := finalize(t, s, "a", "b1", batch.StatusFinalizing, t0)
	if n, err := s.Purge(ctx, t0.Add(time.Hour-time.Second), 24*time.Hour); n != 0 || err != nil {
		t.Fatalf("Purge before anything is due: %d, %v", n, err)
	}
	if n, err := s.Purge(ctx, t0.Add(time.Hour), 24*time.Hour); n != 1 || err != nil {
		t.Fatalf("Purge at the file's expiry: %d, %v; want 1", n, err)
	}
	if _, err := s.File(ctx, "a", "file-exp"); !errors.Is(err, batch.ErrNotFound) {
		t.Fatalf("expired file: %v", err)
	}
	if n, _, _ := s.FileUsage(ctx, "a"); n != 1 {
		t.Fatalf("usage %d files after the purge, want 1", n)
	}
	if got := get(t, s, "a", "b1"); got.Status != batch.StatusCompleted {
		t.Fatalf("batch purged early: %+v", got)
	}
	if n, err := s.Purge(ctx, t0.Add(25*time.Hour), 24*time.Hour); n != 1 || err != nil {
		t.Fatalf("Purge past the retention: %d, %v; want the batch", n, err)
	}
	if _, err := s.Batch(ctx, "a", "b1"); !errors.Is(err, batch.ErrNotFound) {
		t.Fatalf("purged batch: %v", err)
	}
	if _, err := s.File(ctx, "a", b.OutputFileID); !errors.Is(err, batch.ErrNotFound) {
		t.Fatalf("purged batch's output: %v", err)
	}
	if _, err := s.File(ctx, "a", "file-keep"); err != nil {
		t.Fatalf("a file without expiry: %v", err)
	}
	if list, _, _ := s.Batches(ctx, "a", "", 10); len(list) != 0 {
		t.Fatalf("listed %d purged batches", len(list))
	}
}
