package gateway

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/gateway/idempotency"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
	"github.com/sluicehq/sluice/retrybudget"
)

// idemClient is a client of its own, whose connections the test closes,
// so that the leak check sees only the gateway's goroutines.
func idemClient(t *testing.T) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 128}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func idemPost(t *testing.T, c *http.Client, url, body string, headers map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp, readAll(t, resp)
}

// replays reads sluice_idempotent_replays_total{how} from the gateway's
// registry, as a scrape would.
func replays(t *testing.T, g *Gateway, how string) float64 {
	t.Helper()
	mfs, err := g.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_idempotent_replays_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "how" && l.GetValue() == how {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestIdempotencyConcurrentDuplicates: 100 requests with one key at once
// make exactly one upstream call, and all get the same status, headers and
// body. Without the store, each is a call of its own (and most are refused
// by a queue of 16).
func TestIdempotencyConcurrentDuplicates(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) }) // registered first: runs last
	mock, up := testkit.StartMock(t, mockllm.Config{Median: 300 * time.Millisecond})
	g, gw := startGateway(t, baseConfig(up.URL))
	client := idemClient(t)

	const n = 100
	type answer struct {
		status int
		header http.Header
		body   []byte
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, body := idemPost(t, client, gw.URL, chatBody, map[string]string{contract.HeaderIdempotencyKey: "retry-race-1"})
			answers[i] = answer{resp.StatusCode, resp.Header, body}
		})
	}
	wg.Wait()

	if st := mock.Stats(); st.Received != 1 || st.Started != 1 {
		t.Fatalf("upstream received %d, started %d calls; want exactly 1", st.Received, st.Started)
	}
	first := answers[0]
	if first.status != http.StatusOK {
		t.Fatalf("status %d body %s", first.status, first.body)
	}
	for i, a := range answers {
		if a.status != first.status || !bytes.Equal(a.body, first.body) {
			t.Fatalf("answer %d: status %d body %q, want %d %q", i, a.status, a.body, first.status, first.body)
		}
		for _, h := range []string{contract.HeaderModel, contract.HeaderQueueMs, "Content-Type"} {
			if a.header.Get(h) != first.header.Get(h) || a.header.Get(h) == "" {
				t.Errorf("answer %d: %s = %q, want %q", i, h, a.header.Get(h), first.header.Get(h))
			}
		}
	}
	if got := replays(t, g, "waited") + replays(t, g, "stored"); got != n-1 {
		t.Errorf("replays = %v, want %d", got, n-1)
	}
	if got := counter(t, g, "admissions", "interactive", contract.AnonymousTenant, "first"); got != 1 {
		t.Errorf("admissions = %v, want 1: duplicates do not enter the chain", got)
	}
}

// TestIdempotencyStoredAnswer: a duplicate after the call completed gets
// the stored answer; a request without a key, or with another key, is a
// call of its own.
func TestIdempotencyStoredAnswer(t *testing.T) {
	mock, up := testkit.StartMock(t, mockllm.Config{})
	g, gw := startGateway(t, baseConfig(up.URL))
	client := idemClient(t)
	key := map[string]string{contract.HeaderIdempotencyKey: "k-1"}

	r1, b1 := idemPost(t, client, gw.URL, chatBody, key)
	r2, b2 := idemPost(t, client, gw.URL, chatBody, key)
	if r1.StatusCode != 200 || r2.StatusCode != 200 || !bytes.Equal(b1, b2) {
		t.Fatalf("first %d %q, duplicate %d %q", r1.StatusCode, b1, r2.StatusCode, b2)
	}
	if r2.Header.Get(contract.HeaderModel) != "gpt-4o-mini" {
		t.Errorf("the replay's %s = %q", contract.HeaderModel, r2.Header.Get(contract.HeaderModel))
	}
	if got := mock.Stats().Started; got != 1 {
		t.Fatalf("upstream calls = %d, want 1", got)
	}
	if replays(t, g, "stored") != 1 {
		t.Errorf("stored replays = %v, want 1", replays(t, g, "stored"))
	}
	idemPost(t, client, gw.URL, chatBody, nil)
	idemPost(t, client, gw.URL, chatBody, map[string]string{contract.HeaderIdempotencyKey: "k-2"})
	if got := mock.Stats().Started; got != 3 {
		t.Fatalf("upstream calls = %d, want 3", got)
	}
}

// TestIdempotencyKeyReusedForAnotherRequest: the same key with another
// body, or on another path, is a 422 naming the header, not a replay.
func TestIdempotencyKeyReusedForAnotherRequest(t *testing.T) {
	mock, up := testkit.StartMock(t, mockllm.Config{})
	_, gw := startGateway(t, baseConfig(up.URL))
	client := idemClient(t)
	key := map[string]string{contract.HeaderIdempotencyKey: "k-1"}
	if r, b := idemPost(t, client, gw.URL, chatBody, key); r.StatusCode != 200 {
		t.Fatalf("first: %d %s", r.StatusCode, b)
	}
	other := strings.Replace(chatBody, "hello there", "hello again", 1)
	r, b := idemPost(t, client, gw.URL, other, key)
	if r.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("status %d, want 422: %s", r.StatusCode, b)
	}
	if e := decodeError(t, b); e.Code != "idempotency_key_reused" || !strings.Contains(e.Message, "Idempotency-Key") {
		t.Errorf("error = %+v, want code idempotency_key_reused naming Idempotency-Key", e)
	}
	if got := mock.Stats().Received; got != 1 {
		t.Errorf("upstream calls = %d, want 1", got)
	}
}

// TestIdempotencyKeysArePerTenant: tenant B's request with tenant A's key
// is B's own call, with B's own answer.
func TestIdempotencyKeysArePerTenant(t *testing.T) {
	mock, up := testkit.StartMock(t, mockllm.Config{})
	cfg := baseConfig(up.URL)
	cfg.Upstream.APIKeyEnv = "TEST_PROVIDER_KEY"
	cfg.Tenants = []chain.TenantConfig{
		{Name: "acme", APIKeysSHA256: []string{HashKey("key-a")}},
		{Name: "bolt", APIKeysSHA256: []string{HashKey("key-b")}},
	}
	_, gw := startGateway(t, cfg)
	client := idemClient(t)
	for _, key := range []string{"key-a", "key-b", "key-a", "key-b"} {
		r, b := idemPost(t, client, gw.URL, chatBody, map[string]string{
			contract.HeaderIdempotencyKey: "shared", "Authorization": "Bearer " + key})
		if r.StatusCode != 200 {
			t.Fatalf("%s: %d %s", key, r.StatusCode, b)
		}
	}
	if got := mock.Stats().Started; got != 2 {
		t.Fatalf("upstream calls = %d, want 2 (one per tenant)", got)
	}
}

// TestIdempotencyRefusalIsNotStored: a first attempt the gate refused (503)
// leaves nothing behind: the retry with the same key is admitted and makes
// the call, whose answer is then the one replayed.
func TestIdempotencyRefusalIsNotStored(t *testing.T) {
	mock, up := testkit.StartMock(t, mockllm.Config{})
	cfg := baseConfig(up.URL)
	cfg.Admission = config.AdmissionConfig{Concurrency: 1, MaxQueue: new(0)}
	_, gw := startGateway(t, cfg)
	client := idemClient(t)
	key := map[string]string{contract.HeaderIdempotencyKey: "k-1"}

	held := make(chan struct{})
	go func() {
		defer close(held)
		idemPost(t, client, gw.URL, chatBody, map[string]string{mockllm.HeaderLatencyMs: "1000"})
	}()
	testkit.Eventually(t, "the slot taken", func() bool { return mock.Stats().InService == 1 })
	r, b := idemPost(t, client, gw.URL, chatBody, key)
	if r.StatusCode != http.StatusServiceUnavailable && r.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d, want a refusal: %s", r.StatusCode, b)
	}
	<-held
	r, b1 := idemPost(t, client, gw.URL, chatBody, key)
	if r.StatusCode != 200 {
		t.Fatalf("the retry: status %d %s, want 200 (the refusal must not be replayed)", r.StatusCode, b1)
	}
	_, b2 := idemPost(t, client, gw.URL, chatBody, key)
	if !bytes.Equal(b1, b2) {
		t.Errorf("the replay differs from the answer")
	}
	if got := mock.Stats().Started; got != 2 {
		t.Fatalf("upstream calls = %d, want 2 (the held call and the retry)", got)
	}
}

// TestIdempotencyProviderErrorIsNotStored: a provider 500 is delivered but
// not kept; the next request with the key makes the call again.
func TestIdempotencyProviderErrorIsNotStored(t *testing.T) {
	mock, up := testkit.StartMock(t, mockllm.Config{})
	cfg := baseConfig(up.URL)
	cfg.Retries.UpstreamAttempts = 1
	// The second request is a retry of the failed one (seen.go): a budget
	// that refills in a microsecond lets it through.
	cfg.Retries.Budget = retrybudget.Config{MinPerSecond: 1e6, MaxTokens: 10}
	cfg.Retries.PerTenant = cfg.Retries.Budget
	_, gw := startGateway(t, cfg)
	client := idemClient(t)
	r, _ := idemPost(t, client, gw.URL, chatBody, map[string]string{contract.HeaderIdempotencyKey: "k-1", mockllm.HeaderFault: "error"})
	if r.StatusCode != http.StatusInternalServerError {
		t.Fatalf("status %d, want the provider's 500", r.StatusCode)
	}
	r, b := idemPost(t, client, gw.URL, chatBody, map[string]string{contract.HeaderIdempotencyKey: "k-1"})
	if r.StatusCode != 200 {
		t.Fatalf("the retry: status %d %s, want 200", r.StatusCode, b)
	}
	if st := mock.Stats(); st.Faults.Error != 1 || st.Started != 1 {
		t.Fatalf("faults %d, started %d; want 1 and 1", st.Faults.Error, st.Started)
	}
}

// TestIdempotencyWaiterDeadline: a duplicate waits for the call in flight
// no longer than its own deadline.
func TestIdempotencyWaiterDeadline(t *testing.T) {
	mock, up := testkit.StartMock(t, mockllm.Config{})
	_, gw := startGateway(t, baseConfig(up.URL))
	client := idemClient(t)
	done := make(chan []byte)
	go func() {
		_, b := idemPost(t, client, gw.URL, chatBody, map[string]string{contract.HeaderIdempotencyKey: "k-1", mockllm.HeaderLatencyMs: "1000"})
		done <- b
	}()
	testkit.Eventually(t, "the first call in service", func() bool { return mock.Stats().InService == 1 })
	r, b := idemPost(t, client, gw.URL, chatBody, map[string]string{contract.HeaderIdempotencyKey: "k-1", contract.HeaderTimeoutMs: "50"})
	if r.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("status %d, want 504: %s", r.StatusCode, b)
	}
	first := <-done
	_, again := idemPost(t, client, gw.URL, chatBody, map[string]string{contract.HeaderIdempotencyKey: "k-1"})
	if !bytes.Equal(first, again) || mock.Stats().Started != 1 {
		t.Fatalf("after the first completed: a replay was expected (started %d)", mock.Stats().Started)
	}
}

// TestIdempotencyStream: a duplicate of a stream in flight is refused with
// 409 and Retry-After; once the stream has ended, its bytes are replayed.
func TestIdempotencyStream(t *testing.T) {
	mock, up := testkit.StartMock(t, mockllm.Config{})
	_, gw := startGateway(t, baseConfig(up.URL))
	client := idemClient(t)
	stream := `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}],"max_tokens":8}`
	key := map[string]string{contract.HeaderIdempotencyKey: "s-1"}

	req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(stream))
	req.Header.Set(contract.HeaderIdempotencyKey, "s-1")
	req.Header.Set(mockllm.HeaderLatencyMs, "1000")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r, b := idemPost(t, client, gw.URL, stream, key)
	if r.StatusCode != http.StatusConflict || r.Header.Get("Retry-After") == "" {
		t.Fatalf("duplicate of a stream in flight: status %d Retry-After %q, want 409 with Retry-After: %s", r.StatusCode, r.Header.Get("Retry-After"), b)
	}
	if e := decodeError(t, b); e.Code != "idempotency_key_in_flight" {
		t.Errorf("code %q", e.Code)
	}
	original := readAll(t, resp)
	if !bytes.Contains(original, []byte("data: [DONE]")) {
		t.Fatalf("the original stream did not end: %q", original)
	}
	r, replay := idemPost(t, client, gw.URL, stream, key)
	if r.StatusCode != 200 || !bytes.Equal(replay, original) {
		t.Fatalf("replay: status %d, %d bytes, want the original's %d bytes", r.StatusCode, len(replay), len(original))
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Errorf("replay Content-Type %q", ct)
	}
	if got := mock.Stats().Started; got != 1 {
		t.Fatalf("upstream calls = %d, want 1", got)
	}
}

// TestIdempotencyBounds: past max_entries the oldest answer is evicted (its
// key makes a new call); an answer over max_entry_bytes is delivered but
// not kept, and a duplicate gets 409 with Retry-After, not a second call.
func TestIdempotencyBounds(t *testing.T) {
	mock, up := testkit.StartMock(t, mockllm.Config{})
	cfg := baseConfig(up.URL)
	cfg.Idempotency = idempotency.Config{MaxEntries: 1}
	g, gw := startGateway(t, cfg)
	client := idemClient(t)
	for _, k := range []string{"a", "b", "a"} {
		idemPost(t, client, gw.URL, chatBody, map[string]string{contract.HeaderIdempotencyKey: k})
	}
	if got := mock.Stats().Started; got != 3 {
		t.Fatalf("upstream calls = %d, want 3: a was evicted by b", got)
	}
	if n, _ := g.idem.Len(); n != 1 {
		t.Errorf("stored = %d, want 1", n)
	}

	mock, up = testkit.StartMock(t, mockllm.Config{})
	cfg = baseConfig(up.URL)
	cfg.Idempotency = idempotency.Config{MaxEntryBytes: 64}
	_, gw = startGateway(t, cfg)
	key := map[string]string{contract.HeaderIdempotencyKey: "big"}
	r, b := idemPost(t, client, gw.URL, chatBody, key)
	if r.StatusCode != 200 || len(b) <= 64 {
		t.Fatalf("first: status %d, %d bytes", r.StatusCode, len(b))
	}
	r, b = idemPost(t, client, gw.URL, chatBody, key)
	if r.StatusCode != http.StatusConflict || r.Header.Get("Retry-After") == "" {
		t.Fatalf("duplicate of an answer not kept: status %d Retry-After %q: %s", r.StatusCode, r.Header.Get("Retry-After"), b)
	}
	if got := mock.Stats().Started; got != 1 {
		t.Fatalf("upstream calls = %d, want 1", got)
	}
}

// TestIdempotencyKeyMalformed: a bad key is a 400 naming the header, and
// nothing is forwarded.
func TestIdempotencyKeyMalformed(t *testing.T) {
	mock, up := testkit.StartMock(t, mockllm.Config{})
	_, gw := startGateway(t, baseConfig(up.URL))
	client := idemClient(t)
	for name, h := range map[string]http.Header{
		"empty":     {"Idempotency-Key": {""}},
		"too long":  {"Idempotency-Key": {strings.Repeat("k", 256)}},
		"tab":       {"Idempotency-Key": {"a\tb"}},
		"non-ASCII": {"Idempotency-Key": {"clé"}},
		"twice":     {"Idempotency-Key": {"a", "b"}},
	} {
		req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(chatBody))
		req.Header = h
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b := readAll(t, resp)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400: %s", name, resp.StatusCode, b)
			continue
		}
		if e := decodeError(t, b); !strings.HasPrefix(e.Message, "Idempotency-Key: ") {
			t.Errorf("%s: message %q does not name the header", name, e.Message)
		}
	}
	ok, _ := idemPost(t, client, gw.URL, chatBody, map[string]string{contract.HeaderIdempotencyKey: strings.Repeat("k", 255)})
	if ok.StatusCode != 200 {
		t.Errorf("a 255-byte key: status %d", ok.StatusCode)
	}
	if got := mock.Stats().Received; got != 1 {
		t.Errorf("upstream calls = %d, want 1", got)
	}
}

func TestIdempotencyConfigErrors(t *testing.T) {
	for _, tt := range []struct {
		cfg  idempotency.Config
		want string
	}{
		{idempotency.Config{Window: config.Duration(-time.Second)}, "idempotency.window"},
		{idempotency.Config{Window: config.Duration(25 * time.Hour)}, "idempotency.window"},
		{idempotency.Config{MaxEntries: -1}, "idempotency.max_entries"},
		{idempotency.Config{MaxBytes: 1 << 40}, "idempotency.max_bytes"},
		{idempotency.Config{MaxBytes: 1 << 20, MaxEntryBytes: 2 << 20}, "idempotency.max_entry_bytes"},
	} {
		cfg := baseConfig("http://127.0.0.1:1")
		cfg.Idempotency = tt.cfg
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: error %v, want one naming %s", tt.cfg, err, tt.want)
		}
	}
	if _, err := config.Parse([]byte("upstream: {url: 'http://127.0.0.1:1'}\nadmission: {concurrency: 1}\nidempotency: {window: 1h, max_entries: 5, max_bytes: 1048576, max_entry_bytes: 1024}\n")); err != nil {
		t.Errorf("a valid idempotency section: %v", err)
	}
}

// TestIdempotencyRetryAfterClientTimeout: the caller gives up on a keyed
// call and retries it with the key. The first call is not cancelled: the
// retry waits for it and gets its answer, and the provider is called, and
// bills, once. Without a key, the same disconnect cancels the call
// (TestDisconnectCancelsTheUpstreamCall).
func TestIdempotencyRetryAfterClientTimeout(t *testing.T) {
	mock, up := testkit.StartMock(t, mockllm.Config{})
	g, gw := startGateway(t, baseConfig(up.URL))
	client := idemClient(t)

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(chatBody))
	req.Header.Set(contract.HeaderIdempotencyKey, "k-1")
	req.Header.Set(mockllm.HeaderLatencyMs, "500")
	errc := make(chan error)
	go func() {
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	testkit.Eventually(t, "the first call in service", func() bool { return mock.Stats().InService == 1 })
	cancel() // the client's own timeout
	if err := <-errc; err == nil {
		t.Fatal("the first attempt was not cut off")
	}
	r, b := idemPost(t, client, gw.URL, chatBody, map[string]string{contract.HeaderIdempotencyKey: "k-1", contract.HeaderAttempt: "1"})
	if r.StatusCode != 200 {
		t.Fatalf("the retry: status %d %s", r.StatusCode, b)
	}
	if st := mock.Stats(); st.Started != 1 || st.Delivered != 1 {
		t.Fatalf("upstream started %d, delivered %d; want 1 and 1", st.Started, st.Delivered)
	}
	if got := replays(t, g, "waited") + replays(t, g, "stored"); got != 1 {
		t.Errorf("replays = %v, want 1", got)
	}
}

// TestIdempotencyStreamLeftMidway: the caller of a keyed stream leaves
// after its first bytes; the stream is read to its end for the store, and
// the retry gets all of it from one upstream call.
func TestIdempotencyStreamLeftMidway(t *testing.T) {
	mock, up := testkit.StartMock(t, mockllm.Config{})
	g, gw := startGateway(t, baseConfig(up.URL))
	client := idemClient(t)
	stream := `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}],"max_tokens":8}`

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(stream))
	req.Header.Set(contract.HeaderIdempotencyKey, "s-1")
	req.Header.Set(mockllm.HeaderLatencyMs, "500")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := resp.Body.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	testkit.Eventually(t, "the stream stored", func() bool { n, _ := g.idem.Len(); return n == 1 })
	r, b := idemPost(t, client, gw.URL, stream, map[string]string{contract.HeaderIdempotencyKey: "s-1"})
	if r.StatusCode != 200 || !bytes.Contains(b, []byte("data: [DONE]")) {
		t.Fatalf("the retry: status %d %q, want the whole stream", r.StatusCode, b)
	}
	if st := mock.Stats(); st.Started != 1 || st.Wasted != 0 {
		t.Fatalf("upstream started %d, wasted %d; want 1 and 0", st.Started, st.Wasted)
	}
}
