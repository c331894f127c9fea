package gateway

import (
	"bytes"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/gateway/batchapi"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redistest"
)

// batchCall is one Batch API call of tenant acme's, raw: its status,
// headers and error body, and how long it took.
type batchCall struct {
	status int
	header http.Header
	err    contract.ErrorDetail
	took   time.Duration
}

func callBatchAPI(t *testing.T, req *http.Request) batchCall {
	t.Helper()
	req.Header.Set("Authorization", "Bearer sk-acme")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	c := batchCall{status: resp.StatusCode, header: resp.Header, took: time.Since(start)}
	if resp.StatusCode >= 400 {
		c.err = decodeError(t, body)
	}
	return c
}

// uploadRequest is files.create of a one-line file.
func uploadRequest(t *testing.T, url string) *http.Request {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("purpose", "batch")
	fw, _ := mw.CreateFormFile("file", "in.jsonl")
	_, _ = io.WriteString(fw, chatLines(1))
	_ = mw.Close()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/files", &body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	return req
}

func getRequest(t *testing.T, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// checkStoreUnavailable checks a call answered for a store that does not
// answer: 503, Retry-After of whole seconds (at least 1), retry-after-ms,
// X-Sluice-Reason and the code store_unavailable, within limit.
func checkStoreUnavailable(t *testing.T, what string, c batchCall, limit time.Duration) {
	t.Helper()
	secs, serr := strconv.Atoi(c.header.Get(contract.HeaderRetryAfter))
	ms, merr := strconv.Atoi(c.header.Get(contract.HeaderRetryAfterMs))
	if c.status != http.StatusServiceUnavailable || serr != nil || secs < 1 || merr != nil || ms < 1 ||
		c.header.Get(contract.HeaderReason) != batchapi.CodeStoreUnavailable {
		t.Errorf("%s: %d, Retry-After %q, retry-after-ms %q, X-Sluice-Reason %q; want 503, ≥1 s, ≥1 ms, store_unavailable (%+v)", what, c.status,
			c.header.Get(contract.HeaderRetryAfter), c.header.Get(contract.HeaderRetryAfterMs), c.header.Get(contract.HeaderReason), c.err)
	}
	if c.err.Code != batchapi.CodeStoreUnavailable || c.err.Type != contract.ErrorTypeOverloaded ||
		!strings.Contains(c.err.Message, "(Redis) has been unreachable since") || !strings.Contains(c.err.Message, "retry after") {
		t.Errorf("%s: error %+v, want code store_unavailable, type overloaded_error, a message saying since when and when to retry", what, c.err)
	}
	if c.took > limit {
		t.Errorf("%s took %v, more than %v", what, c.took, limit)
	}
}

// TestBatchRedisDownIsSaid: with the batches in Redis, and Redis stopped,
// Batch API calls that need it answer 503 store_unavailable with
// Retry-After, at once — not a hang, not a 500; the state dump and the
// dashboard say Redis is down and since when; once it is back the same
// calls succeed, and the state says up again.
func TestBatchRedisDownIsSaid(t *testing.T) {
	rs := redistest.Start(t)
	_, up := testkit.StartMock(t, mockllm.Config{})
	cfg := batchConfig(t, up.URL)
	cfg.Batch.Path = "" // Redis keeps the batches
	const timeout = time.Second
	cfg.Store = &config.StoreConfig{Redis: &config.RedisStoreConfig{URL: rs.URL(), Cluster: strings.ReplaceAll(t.Name(), "/", "-"),
		Timeout: config.Duration(timeout), Lease: &config.LeaseConfig{Disabled: true}}}
	sv := serve(t, cfg)

	if c := callBatchAPI(t, uploadRequest(t, sv.url)); c.status != http.StatusOK {
		t.Fatalf("an upload with Redis up: %d %+v", c.status, c.err)
	}
	if st := storeState(t, sv.admin); st.State != store.StateUp || st.Since == nil || st.Mode != "redis" {
		t.Fatalf("with Redis up, the state dump's store: %+v, want state up with since", st)
	}

	stopped := time.Now()
	rs.Stop()
	// Each call fails at its first call to Redis: a refused connection
	// (the breaker closed), then the breaker's refusal without trying.
	// Either way within the store's timeout, the test's slack aside.
	for i := range 4 {
		checkStoreUnavailable(t, "files.create", callBatchAPI(t, uploadRequest(t, sv.url)), timeout+time.Second)
		checkStoreUnavailable(t, "batches.retrieve", callBatchAPI(t, getRequest(t, sv.url+"/v1/batches/batch_"+strconv.Itoa(i))), timeout+time.Second)
		checkStoreUnavailable(t, "batches.list", callBatchAPI(t, getRequest(t, sv.url+"/v1/batches")), timeout+time.Second)
	}
	st := storeState(t, sv.admin)
	if st.State != store.StateDown && st.State != store.StateProbing || st.Up || st.Mode != "degraded" || st.Since == nil || st.LastErrorAt == nil {
		t.Fatalf("with Redis stopped, the state dump's store: %+v, want down (or probing) with since and last_error_at", st)
	}
	if st.Since.Before(stopped.Add(-time.Second)) || st.Since.After(time.Now()) {
		t.Errorf("down since %v; Redis was stopped at %v", st.Since, stopped)
	}
	if d := sv.g.dashboardReading(time.Now()).Sample.Store; d == nil || d.State == store.StateUp || d.Since != st.Since.UnixMilli() {
		t.Errorf("the dashboard's store: %+v, want down since %v", d, st.Since)
	}

	restarted := time.Now()
	rs.Restart()
	testkit.Eventually(t, "files.create to succeed again", func() bool {
		c := callBatchAPI(t, uploadRequest(t, sv.url))
		if c.status != http.StatusOK && c.status != http.StatusServiceUnavailable {
			t.Fatalf("files.create while Redis comes back: %d %+v, want 503 then 200", c.status, c.err)
		}
		return c.status == http.StatusOK
	})
	if c := callBatchAPI(t, getRequest(t, sv.url+"/v1/batches/batch_x")); c.status != http.StatusNotFound {
		t.Errorf("batches.retrieve of an unknown id, Redis back: %d %+v, want 404", c.status, c.err)
	}
	if st := storeState(t, sv.admin); st.State != store.StateUp || st.Since == nil || st.Since.Before(restarted) {
		t.Errorf("Redis back, the state dump's store: %+v, want up since after %v", st, restarted)
	}
}

// TestBatchRedisSilentIsBounded: a Redis that takes connections and never
// answers costs a Batch API call at most the store's timeout (a call
// fails at its first call to Redis), then, the breaker open, nothing.
func TestBatchRedisSilentIsBounded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		conns.Wait()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Go(func() {
				_, _ = io.Copy(io.Discard, c) // reads, never answers; ends when the client hangs up
				c.Close()
			})
		}
	}()
	_, up := testkit.StartMock(t, mockllm.Config{})
	cfg := batchConfig(t, up.URL)
	cfg.Batch.Path = ""
	const timeout = 200 * time.Millisecond
	cfg.Store = &config.StoreConfig{Redis: &config.RedisStoreConfig{URL: "redis://" + ln.Addr().String(), Cluster: strings.ReplaceAll(t.Name(), "/", "-"),
		Timeout: config.Duration(timeout), Lease: &config.LeaseConfig{Disabled: true}}}
	sv := serve(t, cfg)
	for i := range 6 {
		checkStoreUnavailable(t, "batches.retrieve #"+strconv.Itoa(i), callBatchAPI(t, getRequest(t, sv.url+"/v1/batches/batch_x")), timeout+time.Second)
	}
	testkit.Eventually(t, "the breaker open", func() bool { return storeState(t, sv.admin).State != store.StateUp })
	c := callBatchAPI(t, getRequest(t, sv.url+"/v1/batches/batch_x"))
	checkStoreUnavailable(t, "batches.retrieve, the breaker open", c, timeout+time.Second)
}
