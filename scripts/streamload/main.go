// Command streamload measures what a proxy costs per open stream and per
// short call, from outside, for scripts/streams.sh. It has three modes:
//
//	streamload upstream --listen ADDR [--interval 100ms] [--hold 30s]
//	streamload streams --target URL --n N --pid PID [--window 10s]
//	streamload calls --target URL --rate R --duration D --pid PID
//
// upstream is the provider: an OpenAI-shaped SSE stream for a body with
// "stream":true (a chunk every interval for hold, each carrying the Unix
// time it was written, in nanoseconds, then a usage chunk and [DONE]),
// and a JSON answer at once otherwise. It is a process of its own, so its
// CPU is not the proxy's.
//
// streams opens N streams through the target, ramped over a few seconds,
// waits until every one has had its first chunk, then measures over the
// window: the target process's (PID) resident memory above what it held
// before the streams opened, per stream; its CPU time (user and system,
// /proc/PID/stat) per chunk delivered; and each chunk's delay from the
// upstream's write to its arrival here (the upstream and this process
// share the machine's clock), p50 and p99. It prints one JSON line.
//
// calls sends short calls (a chat completion, not streamed) at a fixed
// rate, open loop, for the duration, and prints one JSON line: the rate
// achieved, the latency p50 and p99 of the calls answered, the errors by
// kind, and the target's CPU-seconds per 1,000 calls.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: streamload upstream|streams|calls [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "upstream: address to serve on")
	interval := fs.Duration("interval", 100*time.Millisecond, "upstream: time between a stream's chunks")
	hold := fs.Duration("hold", 30*time.Second, "upstream: how long a stream runs")
	target := fs.String("target", "", "streams, calls: the proxy's base URL")
	n := fs.Int("n", 1000, "streams: streams held open at once")
	window := fs.Duration("window", 10*time.Second, "streams: the measuring window, once every stream is open")
	pid := fs.Int("pid", 0, "streams, calls: the target's process id, for its memory and CPU")
	rate := fs.Float64("rate", 1000, "calls: calls a second")
	duration := fs.Duration("duration", 5*time.Second, "calls: how long to send")
	_ = fs.Parse(os.Args[2:])
	switch os.Args[1] {
	case "upstream":
		upstream(*listen, *interval, *hold)
	case "streams":
		streams(*target, *n, *window, *pid)
	case "calls":
		calls(*target, *rate, *duration, *pid)
	default:
		fmt.Fprintf(os.Stderr, "streamload: unknown mode %q\n", os.Args[1])
		os.Exit(2)
	}
}

func upstream(listen string, interval, hold time.Duration) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr().String())
	answer := []byte(`{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":8,"completion_tokens":1,"total_tokens":9}}`)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !bytes.Contains(body, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
			_, _ = w.Write(answer)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		end := time.Now().Add(hold)
		var buf []byte
		chunks := 0
		for time.Now().Before(end) {
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
			}
			buf = append(buf[:0], `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","model":"gpt-4o-mini","t":`...)
			buf = strconv.AppendInt(buf, time.Now().UnixNano(), 10)
			buf = append(buf, `,"choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}],"usage":null}`+"\n\n"...)
			if _, err := w.Write(buf); err != nil {
				return
			}
			fl.Flush()
			chunks++
		}
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\ndata: [DONE]\n\n", chunks, chunks+8)
	})
	srv := &http.Server{Handler: h}
	_ = srv.Serve(ln)
}

// proc reads a process's resident memory (bytes) and CPU time.
func proc(pid int) (rss int64, cpu time.Duration) {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				rss = kb << 10
			}
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		cpu = time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ = 100
	}
	return rss, cpu
}

const streamBody = `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"max_tokens":512,"messages":[{"role":"user","content":"tell me a long story"}]}`

func streams(target string, n int, window time.Duration, pid int) {
	tr := &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: 0, DisableCompression: true}
	client := &http.Client{Transport: tr}
	rss0, _ := proc(pid)
	var (
		measuring atomic.Bool
		chunks    atomic.Int64
		opened    sync.WaitGroup
		ended     sync.WaitGroup
		mu        sync.Mutex
		delays    []time.Duration
		errs      atomic.Int64
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opened.Add(n)
	start := time.Now()
	for i := range n {
		// Ramped: 1,000 streams a second at most, as clients arrive.
		time.Sleep(time.Until(start.Add(time.Duration(i) * time.Millisecond)))
		ended.Add(1)
		go func() {
			defer ended.Done()
			first := true
			defer func() {
				if first {
					opened.Done()
				}
			}()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, target+"/v1/chat/completions", strings.NewReader(streamBody))
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				errs.Add(1)
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				errs.Add(1)
				return
			}
			sc := bufio.NewScanner(resp.Body)
			var local []time.Duration
			for sc.Scan() {
				now := time.Now()
				l := sc.Bytes()
				i := bytes.Index(l, []byte(`"t":`))
				if i < 0 {
					continue
				}
				j := bytes.IndexByte(l[i+4:], ',')
				t, _ := strconv.ParseInt(string(l[i+4:i+4+j]), 10, 64)
				if first {
					first = false
					opened.Done()
				}
				if measuring.Load() {
					chunks.Add(1)
					local = append(local, now.Sub(time.Unix(0, t)))
					if len(local) == 64 {
						mu.Lock()
						delays = append(delays, local...)
						mu.Unlock()
						local = local[:0]
					}
				}
			}
			mu.Lock()
			delays = append(delays, local...)
			mu.Unlock()
		}()
	}
	opened.Wait()
	openedIn := time.Since(start)
	time.Sleep(time.Second) // settle
	measuring.Store(true)
	_, cpu0 := proc(pid)
	t0 := time.Now()
	var peak int64
	for time.Since(t0) < window {
		time.Sleep(500 * time.Millisecond)
		if r, _ := proc(pid); r > peak {
			peak = r
		}
	}
	rss1, cpu1 := proc(pid)
	measuring.Store(false)
	elapsed := time.Since(t0)
	c := chunks.Load()
	cancel()
	ended.Wait()
	mu.Lock()
	slices.Sort(delays)
	d := delays
	mu.Unlock()
	pct := func(p float64) float64 {
		if len(d) == 0 {
			return 0
		}
		return float64(d[min(len(d)-1, int(p*float64(len(d))))].Microseconds()) / 1000
	}
	out := map[string]any{
		"streams": n, "opened_in_s": openedIn.Seconds(), "errors": errs.Load(), "window_s": elapsed.Seconds(),
		"chunks": c, "rss_idle_mb": float64(rss0) / (1 << 20), "rss_mb": float64(rss1) / (1 << 20),
		"rss_per_stream_kb": float64(rss1-rss0) / float64(n) / 1024,
		"cpu_per_chunk_us":  float64(cpu1-cpu0) / float64(max(c, 1)) / 1000,
		"delay_p50_ms":      pct(0.50), "delay_p99_ms": pct(0.99),
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}

const callBody = `{"model":"text-embedding-3-small","max_tokens":1,"messages":[{"role":"user","content":"classify this"}]}`

func calls(target string, rate float64, duration time.Duration, pid int) {
	tr := &http.Transport{MaxIdleConnsPerHost: 4096, DisableCompression: true}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var (
		mu  sync.Mutex
		lat []time.Duration
		// refusals are the answers 429 and 503 with a Retry-After: what
		// shedding is meant to answer, quickly.
		refusals []time.Duration
		// steady are the answers to calls sent after the first
		// seconds (settle): a run's onset apart, what an overload
		// that lasts looks like.
		steady []time.Duration
		errs   = map[string]int{}
		wg     sync.WaitGroup
	)
	settle := min(2*time.Second, duration/4)
	_, cpu0 := proc(pid)
	start := time.Now()
	total := int(rate * duration.Seconds())
	for i := range total {
		time.Sleep(time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))))
		wg.Go(func() {
			t := time.Now()
			req, _ := http.NewRequest(http.MethodPost, target+"/v1/chat/completions", strings.NewReader(callBody))
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			kind := ""
			if err != nil {
				kind = "transport"
				if strings.Contains(err.Error(), "Unsolicited") {
					kind = "unsolicited"
				}
			} else {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					kind = strconv.Itoa(resp.StatusCode)
					if resp.Header.Get("Retry-After") == "" {
						kind += "-no-retry-after"
					}
				}
			}
			d := time.Since(t)
			mu.Lock()
			if kind == "503" || kind == "429" {
				refusals = append(refusals, d)
			}
			if kind != "" {
				errs[kind]++
			} else {
				lat = append(lat, d)
				if t.Sub(start) >= settle {
					steady = append(steady, d)
				}
			}
			mu.Unlock()
		})
	}
	sent := time.Since(start)
	wg.Wait()
	_, cpu1 := proc(pid)
	slices.Sort(lat)
	slices.Sort(refusals)
	slices.Sort(steady)
	pctOf := func(lat []time.Duration, p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	pct := func(p float64) float64 { return pctOf(lat, p) }
	out := map[string]any{
		"rate": rate, "achieved": float64(total) / sent.Seconds(), "answered": len(lat), "errors": errs,
		"p50_ms": pct(0.50), "p99_ms": pct(0.99), "refused": len(refusals), "refusal_p99_ms": pctOf(refusals, 0.99),
		"p99_ms_steady": pctOf(steady, 0.99), "cpu_s_per_1000": (cpu1 - cpu0).Seconds() * 1000 / float64(max(total, 1)),
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}
