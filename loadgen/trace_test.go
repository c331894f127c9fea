package loadgen

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/workload"
)

// traceBodyOf is what a replayed call's body says.
type traceBodyOf struct {
	Model    string `json:"model"`
	Messages []struct {
		Role, Content string
	} `json:"messages"`
	MaxTokens int  `json:"max_tokens"`
	Stream    bool `json:"stream"`
	Seed      *int `json:"seed"`
}

func decodeBody(t *testing.T, s seen) traceBodyOf {
	t.Helper()
	var b traceBodyOf
	if err := json.Unmarshal([]byte(s.body), &b); err != nil {
		t.Fatalf("body %q: %v", s.body, err)
	}
	if len(b.Messages) != 1 || b.Messages[0].Role != "user" || b.Seed == nil {
		t.Fatalf("body %q: want one user message and a seed", s.body)
	}
	return b
}

// The calls of a trace arrive at their own offsets from the start (a
// sleep to each, none between calls of one instant), and the loop never
// waits for an answer: every call is sent while the first is still held.
func TestTraceArrivesAtItsOffsets(t *testing.T) {
	release := make(chan struct{})
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
		<-release
		ok(w, r, n)
	})
	trace := &workload.Trace{Calls: []workload.Call{
		{At: 500 * time.Millisecond, PromptTokens: 1, OutputTokens: 1},
		{At: 500 * time.Millisecond, PromptTokens: 2, OutputTokens: 2},
		{At: 1200 * time.Millisecond, PromptTokens: 3, OutputTokens: 3},
		{At: 3 * time.Second, PromptTokens: 4, OutputTokens: 4},
	}}
	clk := newFakeClock()
	rep := mustRun(t, Config{
		Target: srv.URL, Trace: trace,
		Classes: oneClass("chat", 10*time.Second),
	}, env{clock: clk, arrivalsDone: func() { close(release) }})
	if got, want := clk.Sleeps(), []time.Duration{500 * time.Millisecond, 700 * time.Millisecond, 1800 * time.Millisecond}; !slices.Equal(got, want) {
		t.Errorf("sleeps = %v, want %v: to each call's offset", got, want)
	}
	if rep.Requests != 4 || rep.OnTime != 4 || !rep.Trace {
		t.Errorf("requests %d on time %d trace %v, want 4 4 true", rep.Requests, rep.OnTime, rep.Trace)
	}
	// The whole trace was played: goodput is over its last arrival.
	if rep.WindowSeconds != 3 || rep.Rate != 4.0/3 {
		t.Errorf("window %vs rate %v/s, want 3s (the last arrival) and 4/3", rep.WindowSeconds, rep.Rate)
	}
	// Call i is request i: its seed i, its prompt its own.
	seeds := map[int]bool{}
	for _, s := range srv.seen() {
		b := decodeBody(t, s)
		seeds[*b.Seed] = true
		if want := CharsPerToken * (*b.Seed + 1); len(b.Messages[0].Content) != want {
			t.Errorf("request %d: prompt of %d characters, want %d", *b.Seed, len(b.Messages[0].Content), want)
		}
	}
	if len(seeds) != 4 {
		t.Errorf("seeds sent: %v, want 0 to 3", seeds)
	}
}

// Duration stops a replay at that offset (a call at it is not sent) and is
// then the window; MaxRequests stops it after so many calls.
func TestTraceStopsAtDurationOrMaxRequests(t *testing.T) {
	trace := &workload.Trace{Calls: []workload.Call{
		{At: 0}, {At: time.Second}, {At: 2 * time.Second}, {At: 3 * time.Second},
	}}
	for _, tc := range []struct {
		name        string
		duration    time.Duration
		maxRequests int
		requests    int
		window      float64
	}{
		{"duration", 2 * time.Second, 0, 2, 2},
		{"duration past the end", time.Minute, 0, 4, 3}, // the trace's last arrival
		{"max requests", 0, 3, 3, 2},                    // the wall time: up to the third arrival
		{"both", 3 * time.Second, 2, 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newRecorder(t, ok)
			rep := mustRun(t, Config{
				Target: srv.URL, Trace: trace, Duration: tc.duration, MaxRequests: tc.maxRequests,
				Classes: oneClass("chat", 10*time.Second),
			}, env{clock: newFakeClock()})
			if rep.Requests != tc.requests || len(srv.seen()) != tc.requests {
				t.Errorf("requests %d (server saw %d), want %d", rep.Requests, len(srv.seen()), tc.requests)
			}
			if rep.WindowSeconds != tc.window {
				t.Errorf("window %vs, want %vs", rep.WindowSeconds, tc.window)
			}
		})
	}
}

// Each call is sent as its service's class: that class's priority, key
// and max_tokens (the call's own max_tokens winning), the call's deadline
// (else the class's), a prompt of about 4 characters a token and the
// answer's recorded length for the mock; a retry resends the same bytes.
// The calls arrive at once, so that the deadline a polite caller declares
// is exactly its whole deadline.
func TestTraceCallIsSentAsItsService(t *testing.T) {
	const calls = 4
	var firsts atomic.Int32
	allIn := make(chan struct{}) // every call's first attempt has arrived
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if r.Header.Get(contract.HeaderAttempt) == "0" {
			if firsts.Add(1) == calls {
				close(allIn)
			}
			<-allIn
		}
		// Refuse call 0 once, only now: its wait for a retry moves the
		// clock, which must not move under another call's first attempt.
		if r.Header.Get(HeaderMockOutputTokens) == "129" && r.Header.Get(contract.HeaderAttempt) == "0" {
			reject(w, http.StatusServiceUnavailable, "queue_wait", "100", "")
			return
		}
		ok(w, r, n)
	})
	trace := &workload.Trace{Calls: []workload.Call{
		{Service: "chat", PromptTokens: 1000, OutputTokens: 129},
		{Service: "code", PromptTokens: 1500, OutputTokens: 13, MaxTokens: 200, Deadline: 2500 * time.Millisecond},
		{Service: "chat", PromptTokens: 0, OutputTokens: 5, Deadline: 4 * time.Second},
		{Service: "code", PromptTokens: 7, OutputTokens: 0},
	}}
	rep := mustRun(t, Config{
		Target: srv.URL, Trace: trace, Policy: Polite{}, Model: "m", MaxTokens: 77, APIKey: "sk-default",
		Classes: []Class{
			{Name: "chat", Priority: "interactive", APIKey: "sk-chat", MaxTokens: 1024, Deadline: 10 * time.Second},
			{Name: "code", Deadline: 3 * time.Second},
		},
	}, env{clock: newFakeClock()})
	if rep.Requests != calls || rep.Attempts != calls+1 || rep.OnTime != calls {
		t.Fatalf("requests %d attempts %d on time %d, want 4 5 4", rep.Requests, rep.Attempts, rep.OnTime)
	}
	type want struct {
		priority, key, outputTokens string
		timeoutMs                   []string // by attempt
		maxTokens, promptChars      int
	}
	wants := []want{ // by seed: the call's place in the trace
		{"interactive", "sk-chat", "129", []string{"10000", "9900"}, 1024, 4000}, // refused, retried 100ms later
		{"code", "sk-default", "13", []string{"2500"}, 200, 6000},
		{"interactive", "sk-chat", "5", []string{"4000"}, 1024, 0},
		{"code", "sk-default", "1", []string{"3000"}, 77, 28}, // an empty answer is sent as 1: the mock refuses 0
	}
	got := map[int][]seen{}
	var longest string
	for _, s := range srv.seen() {
		b := decodeBody(t, s)
		if *b.Seed < 0 || *b.Seed >= calls {
			t.Fatalf("seed %d", *b.Seed)
		}
		got[*b.Seed] = append(got[*b.Seed], s)
		w := wants[*b.Seed]
		if s.priority != w.priority || s.header.Get("Authorization") != "Bearer "+w.key || s.header.Get(HeaderMockOutputTokens) != w.outputTokens {
			t.Errorf("call %d: priority %q, %q, %s %q; want %q, Bearer %s, %q", *b.Seed,
				s.priority, s.header.Get("Authorization"), HeaderMockOutputTokens, s.header.Get(HeaderMockOutputTokens),
				w.priority, w.key, w.outputTokens)
		}
		content := b.Messages[0].Content
		if b.Model != "m" || b.MaxTokens != w.maxTokens || len(content) != w.promptChars || b.Stream {
			t.Errorf("call %d: body model %q max_tokens %d prompt of %d characters stream %v; want m %d %d false",
				*b.Seed, b.Model, b.MaxTokens, len(content), b.Stream, w.maxTokens, w.promptChars)
		}
		if len(content) > len(longest) {
			longest = content
		}
	}
	for seed, w := range wants {
		var timeouts []string
		for _, s := range got[seed] {
			timeouts = append(timeouts, s.timeoutMs)
		}
		if !slices.Equal(timeouts, w.timeoutMs) {
			t.Errorf("call %d declared X-Sluice-Timeout-Ms %v, want %v", seed, timeouts, w.timeoutMs)
		}
	}
	if a := got[0]; len(a) != 2 || a[0].body != a[1].body {
		t.Errorf("a retry sent other bytes: %d attempts", len(a))
	}
	// Prompts are cut from one filler text: text, not one repeated byte.
	for _, s := range srv.seen() {
		if c := decodeBody(t, s).Messages[0].Content; !strings.HasPrefix(longest, c) {
			t.Errorf("prompt %.40q... is not a prefix of the filler", c)
		}
	}
	if !strings.Contains(longest, "water from the hills") {
		t.Errorf("filler %.80q... is not text", longest)
	}
}

// A naive caller's attempt timeout is half of its call's own deadline, as
// it is half of its class's.
func TestTraceAttemptTimeoutIsHalfTheCallsDeadline(t *testing.T) {
	srv := newRecorder(t, ok)
	trace := &workload.Trace{Calls: []workload.Call{
		{At: 0, Deadline: 2500 * time.Millisecond},
		{At: 0},
	}}
	mustRun(t, Config{
		Target: srv.URL, Trace: trace, Policy: Naive{},
		Classes: oneClass("chat", 3*time.Second),
	}, env{clock: newFakeClock()})
	got := srv.field(func(s seen) string { return s.timeoutMs })
	slices.Sort(got)
	if want := []string{"1250", "1500"}; !slices.Equal(got, want) {
		t.Errorf("X-Sluice-Timeout-Ms = %v, want %v", got, want)
	}
}

// Per-class figures are each service's: a call is judged by its own
// deadline when it has one, its class's otherwise.
func TestTracePerClassFigures(t *testing.T) {
	// Every answer waits for the last arrival (at 2s) and comes then, so
	// a call's latency is 2s less its arrival.
	release := make(chan struct{})
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
		<-release
		ok(w, r, n)
	})
	trace := &workload.Trace{Calls: []workload.Call{
		{At: 0, Service: "chat", Deadline: time.Second}, // 2s: late by its own deadline
		{At: 0, Service: "chat"},                        // 2s of chat's 10s: on time
		{At: 500 * time.Millisecond, Service: "code"},   // 1.5s of code's 1s: late
		{At: time.Second, Service: "code", Deadline: 5 * time.Second},
		{At: 2 * time.Second, Service: "chat"},
	}}
	// Naive: its attempts are sent whatever the clock says, while a polite
	// caller would not send a call whose deadline the arrival loop's clock
	// has already passed.
	rep := mustRun(t, Config{
		Target: srv.URL, Trace: trace, Policy: Naive{},
		Classes: []Class{{Name: "code", Deadline: time.Second}, {Name: "chat", Deadline: 10 * time.Second}},
	}, env{clock: newFakeClock(), arrivalsDone: func() { close(release) }})
	if rep.Requests != 5 || rep.OnTime != 3 || rep.Late != 2 || rep.Failures[ReasonLate] != 2 {
		t.Errorf("requests %d on time %d late %d failures %v, want 5 3 2 late:2", rep.Requests, rep.OnTime, rep.Late, rep.Failures)
	}
	if rep.WindowSeconds != 2 || rep.Goodput != 1.5 {
		t.Errorf("window %vs goodput %v/s, want 2s and 1.5/s", rep.WindowSeconds, rep.Goodput)
	}
	want := []ClassReport{
		{Name: "code", DeadlineMs: 1000, Requests: 2, Answered: 2, OnTime: 1, Late: 1, SuccessRatio: 0.5},
		{Name: "chat", DeadlineMs: 10000, Requests: 3, Answered: 3, OnTime: 2, Late: 1, SuccessRatio: 2.0 / 3},
	}
	if len(rep.Classes) != 2 {
		t.Fatalf("classes = %+v", rep.Classes)
	}
	for i, w := range want {
		c := rep.Classes[i]
		if c.Name != w.Name || c.DeadlineMs != w.DeadlineMs || c.Requests != w.Requests || c.Attempts != w.Requests ||
			c.Answered != w.Answered || c.OnTime != w.OnTime || c.Late != w.Late || c.SuccessRatio != w.SuccessRatio {
			t.Errorf("class %d = %+v, want %+v", i, c, w)
		}
	}
	if c := rep.Classes[1]; c.Latency.Count != 3 || c.Latency.MaxMs != 2000 || c.Latency.P50Ms != 2000 {
		t.Errorf("chat latency = %+v, want 3 answers, the slowest 2s", c.Latency)
	}
}

// A trace without services is the only class's; a class with no deadline
// is fine when each of its calls has one.
func TestTraceWithoutServicesOrClassDeadline(t *testing.T) {
	srv := newRecorder(t, ok)
	trace := &workload.Trace{Calls: []workload.Call{
		{At: 0, Deadline: 2 * time.Second}, {At: 0, Deadline: 4 * time.Second},
	}}
	rep := mustRun(t, Config{
		Target: srv.URL, Trace: trace, Policy: Polite{},
		Classes: []Class{{Name: "azure", Priority: "batch"}},
	}, env{clock: newFakeClock()})
	if rep.Requests != 2 || rep.Classes[0].Requests != 2 || rep.Classes[0].DeadlineMs != 0 {
		t.Errorf("report = %+v", rep)
	}
	got := srv.field(func(s seen) string { return s.priority + " " + s.timeoutMs })
	slices.Sort(got)
	if !slices.Equal(got, []string{"batch 2000", "batch 4000"}) {
		t.Errorf("priority and timeout sent = %v", got)
	}
	var b strings.Builder
	if err := rep.WriteText(&b); err != nil || !strings.Contains(b.String(), "trace replay") || !strings.Contains(b.String(), "per call") {
		t.Errorf("text report (%v):\n%s", err, b.String())
	}
}

func TestTraceConfigErrors(t *testing.T) {
	calls := func(cs ...workload.Call) *workload.Trace { return &workload.Trace{Calls: cs} }
	two := []Class{{Name: "chat", Deadline: time.Second}, {Name: "code", Deadline: time.Second}}
	good := Config{Target: "http://127.0.0.1:8080", Trace: calls(workload.Call{Service: "chat"}), Classes: two}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, tc := range []struct {
		name, field, says string
		edit              func(c *Config)
	}{
		{"unknown service", "Trace", `service "search"`, func(c *Config) {
			c.Trace = calls(workload.Call{Service: "chat"}, workload.Call{Service: "search"})
		}},
		{"a service among the defaults", "Trace", `service "chat"`, func(c *Config) { c.Classes = nil }},
		{"no service, two classes", "Trace", "names no service", func(c *Config) { c.Trace = calls(workload.Call{}) }},
		{"rate", "Rate", "zero with a Trace", func(c *Config) { c.Rate = 10 }},
		{"same prompt", "SamePrompt", "no meaning", func(c *Config) { c.SamePrompt = true }},
		{"prompt", "Prompt", "must be empty", func(c *Config) { c.Prompt = "hello" }},
		{"no calls", "Trace", "no calls", func(c *Config) { c.Trace = calls() }},
		{"out of order", "Trace", "order of arrival", func(c *Config) {
			c.Trace = calls(workload.Call{Service: "chat", At: time.Second}, workload.Call{Service: "chat"})
		}},
		{"negative offset", "Trace", "before the start", func(c *Config) { c.Trace = calls(workload.Call{Service: "chat", At: -1}) }},
		{"negative tokens", "Trace", "prompt tokens", func(c *Config) { c.Trace = calls(workload.Call{Service: "chat", PromptTokens: -1}) }},
		{"huge max_tokens", "Trace", "max_tokens", func(c *Config) {
			c.Trace = calls(workload.Call{Service: "chat", MaxTokens: workload.MaxTokens + 1})
		}},
		{"negative deadline", "Trace", "deadline", func(c *Config) { c.Trace = calls(workload.Call{Service: "chat", Deadline: -1}) }},
		{"no deadline anywhere", "Classes[1].Deadline", `service "code" needs one`, func(c *Config) {
			c.Classes = []Class{{Name: "chat", Deadline: time.Second}, {Name: "code"}}
			c.Trace = calls(workload.Call{Service: "code", Deadline: time.Second}, workload.Call{Service: "code"})
		}},
		{"negative class deadline", "Classes[0].Deadline", "positive", func(c *Config) { c.Classes = []Class{{Name: "chat", Deadline: -1}} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.edit(&c)
			err := c.Validate()
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field || !strings.Contains(ce.Problem, tc.says) {
				t.Fatalf("err = %v, want a ConfigError for %s saying %q", err, tc.field, tc.says)
			}
			if _, err := Run(t.Context(), c); !errors.As(err, &ce) || ce.Field != tc.field {
				t.Errorf("Run: err = %v, want the same ConfigError", err)
			}
		})
	}
	// What a trace makes optional: a rate, a bound, weights, a class's
	// deadline its calls all carry, a service name with only one class.
	for _, c := range []Config{
		{Target: "http://h", Trace: calls(workload.Call{Service: "chat"}), Classes: []Class{{Name: "chat", Deadline: time.Second}}},
		{Target: "http://h", Trace: calls(workload.Call{}), Classes: []Class{{Name: "any", Deadline: time.Second}}},
		{Target: "http://h", Trace: calls(workload.Call{Service: "chat", Deadline: time.Second}), Classes: []Class{{Name: "chat"}, {Name: "unused"}}},
		{Target: "http://h", Trace: calls(workload.Call{Service: "interactive"}, workload.Call{Service: "batch"})}, // the default classes
	} {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

// The classes of a Poisson mix have their own key, priority and
// max_tokens too; the run's are the defaults.
func TestClassKeyPriorityAndMaxTokens(t *testing.T) {
	for _, same := range []bool{false, true} {
		t.Run("same prompt "+strconv.FormatBool(same), func(t *testing.T) {
			srv := newRecorder(t, ok)
			rep := mustRun(t, Config{
				Target: srv.URL, Rate: 100, MaxRequests: 30, Seed: 4, APIKey: "sk-run", MaxTokens: 22, SamePrompt: same,
				Classes: []Class{
					{Name: "tenant-a", Priority: "interactive", APIKey: "sk-a", MaxTokens: 11, Weight: 1, Deadline: 10 * time.Second},
					{Name: "tenant-b", Weight: 1, Deadline: 10 * time.Second},
				},
			}, env{clock: newFakeClock()})
			want := map[string]struct {
				key       string
				maxTokens int
			}{"interactive": {"Bearer sk-a", 11}, "tenant-b": {"Bearer sk-run", 22}}
			perPriority := map[string]int{}
			bodies := map[string]bool{}
			for _, s := range srv.seen() {
				w, known := want[s.priority]
				if !known {
					t.Fatalf("X-Sluice-Priority %q, want interactive or tenant-b", s.priority)
				}
				perPriority[s.priority]++
				bodies[s.body] = true
				var b traceBodyOf
				if err := json.Unmarshal([]byte(s.body), &b); err != nil {
					t.Fatal(err)
				}
				if got := s.header.Get("Authorization"); got != w.key || b.MaxTokens != w.maxTokens || s.header.Get(HeaderMockOutputTokens) != "" {
					t.Errorf("%s: %q, max_tokens %d, %s %q; want %q and %d, none", s.priority, got, b.MaxTokens,
						HeaderMockOutputTokens, s.header.Get(HeaderMockOutputTokens), w.key, w.maxTokens)
				}
			}
			if perPriority["interactive"] != rep.Classes[0].Requests || perPriority["tenant-b"] != rep.Classes[1].Requests ||
				rep.Classes[0].Requests == 0 || rep.Classes[1].Requests == 0 {
				t.Errorf("server saw %v, report says %d and %d", perPriority, rep.Classes[0].Requests, rep.Classes[1].Requests)
			}
			if wantBodies := map[bool]int{true: 2, false: 30}[same]; len(bodies) != wantBodies {
				t.Errorf("%d distinct bodies, want %d", len(bodies), wantBodies)
			}
		})
	}
}

// A trace call's body is the body chatBody and requestBody would make for
// its prompt, byte for byte, built with one allocation.
func TestTraceBodyIsTheChatBody(t *testing.T) {
	for _, stream := range []bool{false, true} {
		tb, err := newTraceBody(`m"<odd>`, stream, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, chars := range []int{0, 1, 999, 1000} {
			want, err := chatBody(`m"<odd>`, tb.filler[:chars], 9, stream)
			if err != nil {
				t.Fatal(err)
			}
			if got := tb.build(chars, 9, 42); string(got) != string(requestBody(want, 42)) {
				t.Errorf("stream %v, %d characters:\n got %s\nwant %s", stream, chars, got, requestBody(want, 42))
			}
		}
		if n := testing.AllocsPerRun(100, func() { tb.build(1000, 9, 42) }); n != 1 {
			t.Errorf("build allocates %v times, want once", n)
		}
	}
	if tb, _ := newTraceBody("m", false, 0); tb.filler != "" {
		t.Errorf("filler for no prompt = %q", tb.filler)
	}
}
