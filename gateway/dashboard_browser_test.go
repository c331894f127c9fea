package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
	"github.com/sluicehq/sluice/store/redistest"
)

// chromiumPath finds the browser the dashboard test drives. Under CI=true a
// missing browser fails the test: .ci/run installs it, and a dashboard test
// that silently skips there tests nothing.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed (apt-get install -y chromium); CI runs the dashboard's browser test")
	}
	t.Skip("chromium is not installed (apt-get install -y chromium): skipping the dashboard's browser test")
	return ""
}

// pageNumbers are the figures the dashboard shows, read from its DOM.
type pageNumbers struct {
	T           int64  `json:"t"`
	InFlight    int    `json:"in_flight"`
	Concurrency int    `json:"concurrency"`
	Queued      int    `json:"queued"`
	Served      uint64 `json:"served"`
	Refused     uint64 `json:"refused"`
	Level       string `json:"level"`
	Status      string `json:"status"`
}

const readPage = `(() => {
  const n = (id) => Number(document.getElementById(id).textContent);
  return {
    t: Number(document.getElementById("numbers").dataset.t),
    in_flight: n("n-in-flight"), concurrency: n("n-concurrency"), queued: n("n-queued"),
    served: n("n-served"), refused: n("n-refused"),
    level: document.getElementById("status").dataset.level,
    status: document.getElementById("status-text").textContent,
  };
})()`

// refusalsCharted sums the refusals chart's data: what uPlot was given.
const refusalsCharted = `(() => {
  const u = window.sluice.charts.refusals_reason;
  if (!u) return 0;
  return u.data.slice(1).flat().reduce((a, b) => a + (b || 0), 0);
})()`

type stateReading struct {
	at              time.Time
	served, refused uint64
}

// TestDashboardInBrowser loads the dashboard in headless Chromium in front
// of a real gateway and mock provider, sends a storm that is partly
// refused, and checks what the page shows against /admin/v1/state.
func TestDashboardInBrowser(t *testing.T) {
	chromium := chromiumPath(t)
	_, up := testkit.StartMock(t, mockllm.Config{Slots: 2, Median: 150 * time.Millisecond})
	cfg := baseConfig(up.URL)
	cfg.Admission = config.AdmissionConfig{Concurrency: 2, MaxQueue: new(6)}
	// A spend section, far from its ceiling, so that the spend charts are
	// drawn (and shown in the screenshot) without refusing anything.
	cfg.Spend = testSpend()
	cfg.Spend.CeilingPerHour = 5
	cfg.Spend.AlertPerHour = 4
	sv := serve(t, cfg)
	g, api, admin := sv.g, sv.url, sv.admin

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 1200),
	)
	defer cancelAlloc()
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	defer cancelTab()
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
	defer cancelTimeout()

	// Every console error, uncaught exception and browser log error (a
	// blocked request, a CSP violation, a 404) fails the test.
	var mu sync.Mutex
	var problems []string
	listening := chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert || ev.Type == runtime.ConsoleAPICalledTypeWarning {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				problems = append(problems, fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " ")))
			}
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			text := d.Text
			if d.Exception != nil {
				text += " " + d.Exception.Description
			}
			problems = append(problems, fmt.Sprintf("exception: %s at %s:%d", text, d.URL, d.LineNumber))
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.EntryLevelError || ev.Entry.Level == log.EntryLevelWarning {
				problems = append(problems, fmt.Sprintf("log %s: %s %s", ev.Entry.Level, ev.Entry.Text, ev.Entry.URL))
			}
		}
	})
	if listening != nil {
		t.Fatalf("starting chromium: %v", listening)
	}
	if _, err := chromedp.Call(ctx, log.Enable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, runtime.Enable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	// Headless Chromium prefers light; the dashboard is dark unless the
	// system asks otherwise, and the screenshot shows it so.
	if _, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx,
		chromedp.Navigate(admin+"/"),
		chromedp.WaitVisible(chromedp.CSS("#chart-refusals_reason .uplot")),
	); err != nil {
		t.Fatalf("loading the dashboard: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`Number(document.getElementById("numbers").dataset.t) > 0`, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("the dashboard shows no sample: %v", err)
	}
	first, err := chromedp.Run(ctx, chromedp.Evaluate[pageNumbers](readPage))
	if err != nil {
		t.Fatal(err)
	}
	if first.Level != "ok" || !strings.HasPrefix(first.Status, "All clear") {
		t.Errorf("before any load the status is %s %q, want ok \"All clear…\"", first.Level, first.Status)
	}

	// The state, read every 100 ms while the storm runs.
	var states []stateReading
	var statesMu sync.Mutex
	// The fields of State the page is checked against (State itself does
	// not decode: spend's stages only marshal).
	type stateFields struct {
		Time        time.Time         `json:"time"`
		Concurrency int               `json:"concurrency"`
		Counters    map[string]uint64 `json:"counters"`
		Rejected    map[string]uint64 `json:"rejected"`
	}
	readState := func() stateFields {
		resp, err := http.Get(admin + "/admin/v1/state")
		if err != nil {
			t.Error(err)
			return stateFields{}
		}
		var s stateFields
		decodeJSON(t, resp, &s)
		return s
	}
	record := func() {
		s := readState()
		var refused uint64
		for _, n := range s.Rejected {
			refused += n
		}
		statesMu.Lock()
		states = append(states, stateReading{s.Time, s.Counters["completed_success"], refused})
		statesMu.Unlock()
	}
	stormDone := make(chan struct{})
	var pollers sync.WaitGroup
	pollers.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			record()
			select {
			case <-stormDone:
				return
			case <-tick.C:
			}
		}
	})

	// The storm: 200 requests over 3 s, about 67/s against a capacity of
	// about 13/s, half interactive and half batch: many are refused.
	var storm sync.WaitGroup
	codes := make(chan int, 200)
	client := &http.Client{Timeout: 20 * time.Second}
	for i := range 200 {
		storm.Go(func() {
			time.Sleep(time.Duration(i) * 15 * time.Millisecond) // the storm's schedule, not synchronisation
			class := admission.ClassInteractive
			if i%2 == 1 {
				class = admission.ClassBatch
			}
			req, _ := http.NewRequest(http.MethodPost, api+"/v1/chat/completions", strings.NewReader(chatBody))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(contract.HeaderPriority, class)
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		})
	}

	// While it runs, what the page shows is checked against the state
	// read around the same moment.
	var readings []pageNumbers
	var readAt []time.Time
	deadline := time.Now().Add(3500 * time.Millisecond)
	for time.Now().Before(deadline) {
		p, err := chromedp.Run(ctx, chromedp.Evaluate[pageNumbers](readPage))
		if err != nil {
			t.Fatal(err)
		}
		readings = append(readings, p)
		readAt = append(readAt, time.Now())
		if err := chromedp.Do(ctx, chromedp.Sleep(250*time.Millisecond)); err != nil { // the pace of the readings, not synchronisation
			t.Fatal(err)
		}
	}
	storm.Wait()
	close(codes)
	close(stormDone)
	pollers.Wait()
	refusedCodes := 0
	for c := range codes {
		if c == http.StatusTooManyRequests || c == http.StatusServiceUnavailable {
			refusedCodes++
		}
	}
	if refusedCodes == 0 {
		t.Fatal("the storm was not refused at all: the test does not exercise refusals")
	}

	checked := 0
	for i, p := range readings {
		// Fresh: the sample shown is at most a second old (plus the
		// time to deliver and draw it).
		if age := readAt[i].Sub(time.UnixMilli(p.T)); age > 1500*time.Millisecond {
			t.Errorf("reading %d: the page shows a sample %v old", i, age)
		}
		// Within a second of the state: the totals the page shows lie
		// between the state's just before and just after its sample.
		at := time.UnixMilli(p.T)
		var before, after *stateReading
		for j := range states {
			s := &states[j]
			if !s.at.After(at) {
				before = s
			}
			if !s.at.Before(at) && after == nil {
				after = s
			}
		}
		if before == nil || after == nil || at.Sub(before.at) > time.Second || after.at.Sub(at) > time.Second {
			continue // outside the recorded stretch
		}
		checked++
		if p.Served < before.served || p.Served > after.served || p.Refused < before.refused || p.Refused > after.refused {
			t.Errorf("reading %d at %v: page served %d refused %d; state before (%v) %d %d, after (%v) %d %d",
				i, at.Format("15:04:05.000"), p.Served, p.Refused, before.at.Format("15:04:05.000"), before.served, before.refused,
				after.at.Format("15:04:05.000"), after.served, after.refused)
		}
	}
	if checked < 5 {
		t.Errorf("only %d of %d page readings fell inside the recorded state", checked, len(readings))
	}

	// Settled: the page and the state agree exactly.
	testkit.Eventually(t, "the gateway idle", func() bool { st := g.Gate().Stats(); return st.InFlight+st.Queued == 0 })
	final := readState()
	var finalRefused uint64
	for _, n := range final.Rejected {
		finalRefused += n
	}
	want := fmt.Sprintf(`(() => { const p = %s; return p.served === %d && p.refused === %d && p.in_flight === 0 && p.queued === 0 && p.concurrency === %d; })()`,
		readPage, final.Counters["completed_success"], finalRefused, final.Concurrency)
	_, settled := chromedp.Run(ctx, chromedp.Poll[bool](want, chromedp.WithPollingTimeout(3*time.Second)))
	last, err := chromedp.Run(ctx, chromedp.Evaluate[pageNumbers](readPage))
	if err != nil {
		t.Fatal(err)
	}
	if settled != nil {
		t.Fatalf("the page does not settle on the state (served %d, refused %d, concurrency %d): it shows %+v: %v",
			final.Counters["completed_success"], finalRefused, final.Concurrency, last, settled)
	}
	charted, err := chromedp.Run(ctx, chromedp.Evaluate[float64](refusalsCharted))
	if err != nil {
		t.Fatal(err)
	}
	if charted < 1 {
		t.Errorf("the refusals chart holds %v refusals, want the storm's %d", charted, finalRefused)
	}
	if last.Level != "crit" || !strings.HasPrefix(last.Status, "Interactive work is being shed: capacity is missing") {
		t.Errorf("after the storm the status is %s %q, want crit \"Interactive work is being shed: capacity is missing…\"", last.Level, last.Status)
	}

	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(t.TempDir(), "dashboard.png")
	if os.Getenv("SLUICE_UPDATE_SCREENSHOT") == "1" {
		shot = filepath.Join("..", "docs", "dashboard.png")
	}
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", shot)

	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Errorf("browser: %s", p)
	}
}

// openDashboard opens url in a headless Chromium tab, closed at the end
// of the test; the context bounds what the test does in it to a minute.
func openDashboard(t *testing.T, chromium, url string) context.Context {
	t.Helper()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(chromium),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()))
	t.Cleanup(cancelAlloc)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	t.Cleanup(cancelTab)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	return ctx
}

// TestDashboardPoolsInBrowser: with upstreams the dashboard shows a row per
// pool, and marks the pool of a deployment that cannot be reached down.
func TestDashboardPoolsInBrowser(t *testing.T) {
	chromium := chromiumPath(t)
	_, up := testkit.StartMock(t, mockllm.Config{Slots: 4})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close() // connections refused
	sv := serve(t, config.Config{Upstreams: []config.DeploymentConfig{
		{Name: "east", URL: dead, Concurrency: 2, Models: []config.ModelConfig{{Name: "gpt-4o-mini"}}},
		{Name: "west", URL: up.URL, Concurrency: 3, Models: []config.ModelConfig{{Name: "gpt-4o-mini"}, {Name: "gpt-4.1"}}},
	}})
	resp := post(t, t.Context(), sv.url, chatBody, nil) // east refuses: west answers, east is down
	readAll(t, resp)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(contract.HeaderUpstream) != "west" {
		t.Fatalf("the call: %d via %q, want 200 via west", resp.StatusCode, resp.Header.Get(contract.HeaderUpstream))
	}
	ctx := openDashboard(t, chromium, sv.admin+"/")
	rows := `Array.from(document.querySelectorAll("#pools-body tr")).map(tr => Array.from(tr.cells).map(td => td.textContent).join("|"))`
	// A sample a second: the first may predate the call.
	want := []string{"east/gpt-4o-mini|0 / 2|0|–|down", "west/gpt-4o-mini|0 / 3|0|–|up", "west/gpt-4.1|0 / 3|0|–|up"}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`!document.getElementById("pools").hidden && document.querySelector("#pools-body tr[data-down=true]") !== null`,
		chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		got, _ := chromedp.Run(ctx, chromedp.Evaluate[[]string](rows))
		t.Fatalf("the pools table never showed east down: %q, want %q (%v)", got, want, err)
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](rows))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("pools table %q, want %q", got, want)
	}
	// Without Redis, no Redis badge.
	if hidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("num-store").hidden`)); err != nil || !hidden {
		t.Errorf("without store.redis the Redis badge is shown (hidden %v, %v)", hidden, err)
	}
}

// TestDashboardStoreInBrowser: with store.redis the dashboard shows Redis
// up, then down since when — in the badge and the status line — once it
// stops, and up again once it is back.
func TestDashboardStoreInBrowser(t *testing.T) {
	chromium := chromiumPath(t)
	rs := redistest.Start(t)
	_, up := testkit.StartMock(t, mockllm.Config{})
	cfg := batchConfig(t, up.URL)
	cfg.Batch.Path = "" // Redis keeps the batches
	cfg.Store = &config.StoreConfig{Redis: &config.RedisStoreConfig{URL: rs.URL(), Cluster: strings.ReplaceAll(t.Name(), "/", "-"),
		Timeout: config.Duration(time.Second), Lease: &config.LeaseConfig{Disabled: true}}}
	sv := serve(t, cfg)
	ctx := openDashboard(t, chromium, sv.admin+"/")
	const badge = `(() => { const b = document.getElementById("num-store"); return b.hidden ? "hidden" : b.dataset.state + "|" + document.getElementById("n-store").textContent; })()`
	const status = `document.getElementById("status-text").textContent`
	waitFor := func(what, cond string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
			got, _ := chromedp.Run(ctx, chromedp.Evaluate[string](badge))
			st, _ := chromedp.Run(ctx, chromedp.Evaluate[string](status))
			t.Fatalf("the page never showed %s: the badge shows %q, the status %q (%v)", what, got, st, err)
		}
	}
	waitFor("Redis up", `(`+badge+`).startsWith("up|up since ")`)

	rs.Stop()
	c := callBatchAPI(t, getRequest(t, sv.url+"/v1/batches")) // the breaker counts the failures, the batches' loops' too
	if c.status != http.StatusServiceUnavailable {
		t.Fatalf("batches.list with Redis stopped: %d, want 503", c.status)
	}
	waitFor("Redis down", `/^(down|probing)\|(down|probing) since /.test(`+badge+`) && (`+status+`).startsWith("Redis unreachable since ")`)

	rs.Restart()
	waitFor("Redis up again", `(`+badge+`).startsWith("up|up since ") && (`+status+`).startsWith("All clear")`)
}
