// Command slowloris attacks a gateway with connections that hold it without
// asking anything of it — bodies sent a byte a second, connections left
// idle after a 401 — from one loopback address, while a probe client sends
// valid requests from another address on a fresh connection each, and
// reports the probe's latency, what became of the attack's connections, and
// the gateway's memory (its resident set, read from /proc).
//
// It is the measurement behind the "Hostile connections" section of
// docs/perf.md; scripts/hostile.sh runs it against the gateway before and
// after the connection limits. Loopback only, bounded in time and count.
//
//	slowloris --target 127.0.0.1:8080 --key sk-probe --pid 1234 \
//	  [--slow 2000] [--idle 2000] [--duration 30s]
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
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
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "slowloris:", err)
		os.Exit(1)
	}
}

type options struct {
	target, from, probeFrom, key string
	slow, idle                   int
	duration, probeEvery, redial time.Duration
	probeTimeout                 time.Duration
	pid                          int
	probe                        bool
}

func run() error {
	var o options
	flag.StringVar(&o.target, "target", "", "gateway API `address` (host:port), loopback only")
	flag.StringVar(&o.from, "from", "127.0.0.1", "loopback `address` the attack comes from")
	flag.StringVar(&o.probeFrom, "probe-from", "127.0.0.2", "loopback `address` the probe comes from")
	flag.StringVar(&o.key, "key", "", "a valid tenant key for the probe")
	flag.IntVar(&o.slow, "slow", 2000, "slow-body connections to hold")
	flag.IntVar(&o.idle, "idle", 2000, "idle-after-401 connections to hold")
	flag.DurationVar(&o.duration, "duration", 30*time.Second, "how long the attack and the probe run")
	flag.DurationVar(&o.probeEvery, "probe-every", 50*time.Millisecond, "time between probe requests")
	flag.DurationVar(&o.probeTimeout, "probe-timeout", 2*time.Second, "a probe request not answered by then counts as failed")
	flag.DurationVar(&o.redial, "redial", time.Second, "how long an attacker waits before reopening a connection the gateway closed")
	flag.IntVar(&o.pid, "pid", 0, "the gateway's `pid`, whose VmRSS, descriptors and CPU time are sampled")
	flag.BoolVar(&o.probe, "probe", true, "run the probe (false: the attack alone, for a probe in another process)")
	flag.Parse()
	for _, a := range []struct{ flag, addr string }{{"--from", o.from}, {"--probe-from", o.probeFrom}} {
		if ip := net.ParseIP(a.addr); ip == nil || !ip.IsLoopback() {
			return fmt.Errorf("%s: %q is not a loopback address", a.flag, a.addr)
		}
	}
	host, _, err := net.SplitHostPort(o.target)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--target: %q is not a loopback host:port", o.target)
	}
	switch {
	case o.key == "" && o.probe:
		return errors.New("--key is required")
	case o.slow < 0 || o.slow > 10000:
		return fmt.Errorf("--slow: %d, want 0..10000", o.slow)
	case o.idle < 0 || o.idle > 10000:
		return fmt.Errorf("--idle: %d, want 0..10000", o.idle)
	case o.duration <= 0 || o.duration > 10*time.Minute:
		return fmt.Errorf("--duration: %v, want 0..10m", o.duration)
	case o.probeEvery <= 0 || o.probeTimeout <= 0 || o.redial <= 0:
		return errors.New("--probe-every, --probe-timeout and --redial must be positive")
	}

	ctx, cancel := context.WithTimeout(context.Background(), o.duration)
	defer cancel()
	var st attackStats
	var wg sync.WaitGroup
	for i := range o.slow + o.idle {
		wg.Add(1)
		go func() {
			defer wg.Done()
			attacker(ctx, &o, &st, i < o.slow)
		}()
	}
	var rss rssSampler
	rssDone := make(chan struct{})
	go func() { defer close(rssDone); rss.run(ctx, o.pid) }()
	cpu0 := cpuTime(o.pid)
	var lat []time.Duration
	var failed int
	if o.probe {
		lat, failed = probe(ctx, &o)
	} else {
		<-ctx.Done()
	}
	wg.Wait()
	<-rssDone
	cpu := cpuTime(o.pid) - cpu0

	slices.Sort(lat)
	if o.probe {
		printProbe(&o, lat, failed)
	}
	if o.slow+o.idle > 0 {
		fmt.Printf("attack: %d connections opened, %d refused at once (a canned 503/429 or a close), %d closed later by the gateway, %d dials failed, %d held at most at once\n",
			st.opened.Load(), st.refused.Load(), st.closed.Load(), st.dialErrs.Load(), st.maxHeld.Load())
	}
	if o.pid > 0 {
		fmt.Printf("gateway: max RSS %.1f MiB, max open descriptors %d, CPU %.0f%% of one core\n",
			float64(rss.maxRSS.Load())/1024, rss.maxFDs.Load(), 100*cpu.Seconds()/o.duration.Seconds())
	}
	return nil
}

func printProbe(o *options, lat []time.Duration, failed int) {
	fmt.Printf("probe: %d served, %d failed (no answer within %v or an error)\n", len(lat), failed, o.probeTimeout)
	if len(lat) > 0 {
		fmt.Printf("probe latency: p50 %v  p99 %v  max %v\n", pct(lat, 0.50), pct(lat, 0.99), lat[len(lat)-1])
	}
	all := append(slices.Clone(lat), slices.Repeat([]time.Duration{o.probeTimeout}, failed)...)
	slices.Sort(all)
	if len(all) > 0 {
		fmt.Printf("probe latency, failures counted as %v: p99 %v\n", o.probeTimeout, pct(all, 0.99))
	}
}

// cpuTime is the user and system time of pid so far (0 when pid is 0 or
// gone), from /proc/PID/stat at the usual 100 ticks a second.
func cpuTime(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after its closing parenthesis (utime and stime are fields 14, 15).
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond
}

func pct(sorted []time.Duration, q float64) time.Duration {
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))].Round(10 * time.Microsecond)
}

type attackStats struct {
	opened, refused, closed, dialErrs, held, maxHeld atomic.Int64
}

func (s *attackStats) hold(d int64) {
	n := s.held.Add(d)
	for m := s.maxHeld.Load(); n > m && !s.maxHeld.CompareAndSwap(m, n); m = s.maxHeld.Load() {
	}
}

// attacker keeps one connection open against the gateway until ctx ends,
// reopening it redial after the gateway closes it. A slow one declares a
// 10,000-byte body (below the 256 KiB net/http drains after a handler that
// did not read it, so the gateway keeps reading) and sends a byte a second;
// an idle one sends a request with a wrong key and then nothing.
func attacker(ctx context.Context, o *options, st *attackStats, slow bool) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(o.from)}, Timeout: 5 * time.Second}
	buf := make([]byte, 512)
	for ctx.Err() == nil {
		c, err := d.DialContext(ctx, "tcp", o.target)
		if err != nil {
			if ctx.Err() == nil {
				st.dialErrs.Add(1)
			}
			wait(ctx, o.redial)
			continue
		}
		st.opened.Add(1)
		st.hold(1)
		stop := context.AfterFunc(ctx, func() { c.Close() })
		var req string
		if slow {
			req = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-wrong\r\nContent-Type: application/json\r\nContent-Length: 10000\r\n\r\n{"
		} else {
			req = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-wrong\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
		}
		first := true
		_, err = io.WriteString(c, req)
		for err == nil {
			// Read for a second: the gateway's answer or close, else
			// trickle one more byte (slow) or go on waiting (idle).
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			var n int
			n, err = c.Read(buf)
			if n > 0 && first && (bytes.HasPrefix(buf[:n], []byte("HTTP/1.1 503")) || bytes.HasPrefix(buf[:n], []byte("HTTP/1.1 429"))) {
				err = io.EOF // refused: counted below, as first
				break
			}
			if n > 0 {
				first = false
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				err = nil
				if slow {
					_, err = c.Write([]byte(" "))
				}
			}
		}
		stop()
		c.Close()
		st.hold(-1)
		if ctx.Err() != nil {
			return
		}
		if first {
			st.refused.Add(1) // a canned refusal, or a close before any answer
		} else {
			st.closed.Add(1)
		}
		wait(ctx, o.redial)
	}
}

func wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// probe sends a valid chat completion every probeEvery, each on a fresh
// connection from probeFrom (what a new client meets: the accept queue, the
// caps), and returns the latencies of the answered ones and how many failed.
func probe(ctx context.Context, o *options) ([]time.Duration, int) {
	tr := &http.Transport{
		DialContext:       (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(o.probeFrom)}}).DialContext,
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: o.probeTimeout}
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":8}`
	var mu sync.Mutex
	var lat []time.Duration
	failed := 0
	var wg sync.WaitGroup
	tick := time.NewTicker(o.probeEvery)
	defer tick.Stop()
	// The last probeTimeout is left out: a request sent then could not be
	// told apart from one the end of the run cut.
	end, _ := ctx.Deadline()
	end = end.Add(-o.probeTimeout)
	for now := range tick.C {
		if now.After(end) {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, "http://"+o.target+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+o.key)
			req.Header.Set("Content-Type", "application/json")
			start := time.Now()
			resp, err := client.Do(req)
			ok := err == nil
			if ok {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				ok = err == nil && resp.StatusCode == http.StatusOK
			}
			d := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			if ok {
				lat = append(lat, d)
			} else {
				failed++
			}
		}()
	}
	wg.Wait()
	return lat, failed
}

// rssSampler reads the gateway's VmRSS and open descriptors every 100ms.
type rssSampler struct {
	maxRSS, maxFDs atomic.Int64 // KiB, count
}

func (s *rssSampler) run(ctx context.Context, pid int) {
	if pid <= 0 {
		return
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if kb := vmRSS(pid); kb > s.maxRSS.Load() {
			s.maxRSS.Store(kb)
		}
		if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil && int64(len(fds)) > s.maxFDs.Load() {
			s.maxFDs.Store(int64(len(fds)))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func vmRSS(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb
		}
	}
	return 0
}
