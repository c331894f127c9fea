package dashboard

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/admission"
)

// serveBoard serves a Board's routes over HTTP, as the admin listener
// does.
func serveBoard(t *testing.T, b *Board) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	b.Mount(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// TestDashboardPage: the page and its assets come from the binary, under a
// policy that lets them load nothing from elsewhere.
func TestDashboardPage(t *testing.T) {
	f := &fakeGateway{}
	srv := serveBoard(t, New(testClasses, nil, f.read))
	for path, ctype := range map[string]string{
		"/":                            "text/html",
		"/dashboard/app.js":            "text/javascript",
		"/dashboard/style.css":         "text/css",
		"/dashboard/uPlot.iife.min.js": "text/javascript",
		"/dashboard/uPlot.min.css":     "text/css",
		"/dashboard/favicon.svg":       "image/svg+xml",
		"/favicon.ico":                 "image/svg+xml",
		"/dashboard/uPlot.LICENSE":     "text/plain",
		"/admin/v1/history":            "application/json",
		"/dashboard/missing.js":        "404",
		"/dashboard/README.md":         "404", // the directory's notes are not served
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case ctype == "404":
			if resp.StatusCode != 404 {
				t.Errorf("%s: %d", path, resp.StatusCode)
			}
		case resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), ctype):
			t.Errorf("%s: %d %q, want 200 %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), ctype)
		case ctype != "application/json" && resp.Header.Get("Content-Security-Policy") != "default-src 'self'":
			t.Errorf("%s: Content-Security-Policy %q", path, resp.Header.Get("Content-Security-Policy"))
		case path == "/" && !strings.Contains(string(body), `src="/dashboard/uPlot.iife.min.js"`):
			t.Errorf("the page does not load uPlot from the binary: %s", body)
		}
	}
	// Nothing in the page or its code names another origin.
	for _, name := range []string{"index.html", "app.js", "style.css"} {
		b, err := assets.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if m := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`).Find(b); m != nil {
			t.Errorf("%s names another origin: %s", name, m)
		}
	}
}

// TestEventsFollowRun: /admin/v1/events sends the history, then each
// sample; the end of Run ends the stream, with no goroutine left behind.
func TestEventsFollowRun(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	f := &fakeGateway{}
	b := New(testClasses, nil, f.read)
	srv := serveBoard(t, b)
	defer srv.Close()

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- b.Run(ctx) }()

	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	resp, err := (&http.Client{Transport: transport}).Get(srv.URL + "/admin/v1/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	r := bufio.NewReader(resp.Body)
	event, data := readEvent(t, r)
	var h History
	if err := json.Unmarshal(data, &h); event != "history" || err != nil {
		t.Fatalf("first event %q: %v", event, err)
	}
	if h.Meta.Classes[admission.ClassInteractive].Rank != 4 || h.Meta.EverySeconds != 1 {
		t.Fatalf("meta: %+v", h.Meta)
	}
	event, data = readEvent(t, r)
	var d Sample
	if err := json.Unmarshal(data, &d); event != "" || err != nil || d.Concurrency != 4 || d.Status.Text == "" {
		t.Fatalf("second event %q %s: %v", event, data, err)
	}
	stop()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		t.Fatalf("the stream did not end with Run: %v", err)
	}
}

// TestHistoryJSON: the history's field names, which app.js reads.
func TestHistoryJSON(t *testing.T) {
	f := &fakeGateway{spend: true}
	b := New(testClasses, nil, f.read)
	b.Sample(time.Now())
	srv := serveBoard(t, b)
	resp, err := http.Get(srv.URL + "/admin/v1/history")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h struct {
		Meta struct {
			EverySeconds float64 `json:"every_seconds"`
			Classes      map[string]struct {
				Rank             int   `json:"rank"`
				DefaultTimeoutMs int64 `json:"default_timeout_ms"`
			} `json:"classes"`
		} `json:"meta"`
		Samples []map[string]json.RawMessage `json:"samples"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	if h.Meta.EverySeconds != 1 || h.Meta.Classes["batch"].DefaultTimeoutMs != 600000 || len(h.Samples) != 1 {
		t.Fatalf("history: %+v", h)
	}
	want := []string{"capacity", "concurrency", "depth", "goodput", "in_flight", "queued", "refused", "refused_class",
		"refused_reason", "served", "service_ms", "shed_class", "spend", "status", "t", "wait_ms"}
	if got := slices.Sorted(maps.Keys(h.Samples[0])); !slices.Equal(got, want) {
		t.Errorf("a sample's fields %q, want %q", got, want)
	}
	var sp map[string]json.RawMessage
	if err := json.Unmarshal(h.Samples[0]["spend"], &sp); err != nil {
		t.Fatal(err)
	}
	want = []string{"alerting", "rate_per_hour", "stage", "tenants", "wasted_per_hour", "wasted_usd"}
	if got := slices.Sorted(maps.Keys(sp)); !slices.Equal(got, want) {
		t.Errorf("a sample's spend fields %q, want %q", got, want)
	}
}

// readEvent reads one server-sent event: its name ("" for a message) and
// data.
func readEvent(t *testing.T, r *bufio.Reader) (string, []byte) {
	t.Helper()
	var event string
	var data []byte
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the event stream: %v", err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			return event, data
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: ")...)
		}
	}
}
