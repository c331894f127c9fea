package guard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// syncBuffer is a log's output, written by the listener's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// refusalLines are the "connections refused" lines written so far.
func (s *syncBuffer) refusalLines(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	text := s.b.String()
	s.mu.Unlock()
	var out []map[string]any
	for l := range strings.Lines(text) {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if m["msg"] == "connections refused" {
			out = append(out, m)
		}
	}
	return out
}

// sum is the refusals the lines count, by reason.
func sum(lines []map[string]any) map[string]int {
	out := map[string]int{}
	for _, l := range lines {
		out[l["reason"].(string)] += int(l["count"].(float64))
	}
	return out
}

// TestRefusalsAreSummedPerWindow: refusals are written within a window of
// the first, one line per reason and address with its count, the busiest
// refusalAddrs addresses of a reason in lines of their own and the rest in
// one "other" line; nothing is written for a quiet window, and close
// writes what is pending at once.
func TestRefusalsAreSummedPerWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		out := &syncBuffer{}
		r := newRefusalLog(slog.New(slog.NewJSONHandler(out, nil)), time.Second)
		busy := netip.MustParseAddr("10.0.0.1")
		for range 50 {
			r.add("unauthenticated_per_ip", busy)
		}
		for i := range 30 { // 30 more addresses, once each
			r.add("unauthenticated_per_ip", netip.AddrFrom4([4]byte{10, 1, 0, byte(i)}))
		}
		r.add("out_of_descriptors", netip.Addr{})
		time.Sleep(999 * time.Millisecond)
		synctest.Wait()
		if n := len(out.refusalLines(t)); n != 0 {
			t.Fatalf("%d lines before the window ended", n)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		lines := out.refusalLines(t)
		if got := sum(lines); got["unauthenticated_per_ip"] != 80 || got["out_of_descriptors"] != 1 {
			t.Errorf("counts %v, want 80 unauthenticated_per_ip and 1 out_of_descriptors", got)
		}
		perIP, other := 0, map[string]any(nil)
		for _, l := range lines {
			if l["reason"] != "unauthenticated_per_ip" {
				continue
			}
			perIP++
			if l["addr"] == "other" {
				other = l
			}
		}
		if perIP != refusalAddrs+1 || other == nil || other["addresses"] != float64(31-refusalAddrs) || other["count"] != float64(31-refusalAddrs) {
			t.Errorf("%d unauthenticated_per_ip lines, other %v: want %d addresses and one other line of the remaining %d", perIP, other, refusalAddrs, 31-refusalAddrs)
		}
		if l := lines[0]; l["reason"] != "out_of_descriptors" || l["addr"] != "" || l["status"] != float64(0) {
			t.Errorf("first line %v: want out_of_descriptors, no address, status 0", l)
		}
		if l := lines[1]; l["addr"] != "10.0.0.1" || l["count"] != float64(50) || l["status"] != float64(429) {
			t.Errorf("second line %v: want the busiest address, 50, status 429", l)
		}

		time.Sleep(10 * time.Second) // a quiet spell writes nothing
		synctest.Wait()
		if n := len(out.refusalLines(t)); n != len(lines) {
			t.Errorf("%d lines after a quiet spell, want %d", n, len(lines))
		}
		r.add("max_connections", busy)
		r.close()
		if got := sum(out.refusalLines(t))["max_connections"]; got != 1 {
			t.Errorf("max_connections after close: %d, want 1 written at once", got)
		}
	})
}

// TestEveryListenerRefusalIsLogged: on a real listener, the refusals'
// lines count exactly what sluice_connections_refused_total does.
func TestEveryListenerRefusalIsLogged(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	m := newMetrics(prometheus.NewRegistry())
	l := newListener(ln, Limits{MaxConns: 6, MaxUnauthPerIP: 2, Write: time.Second}, slog.New(slog.NewJSONHandler(out, nil)), m)
	accepted := make(chan net.Conn, 64)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	var clients []net.Conn
	dial := func(from string) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		// Wait for the listener's verdict: a refusal is read and closed.
		_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		_, _ = c.Read(make([]byte, 1))
	}
	for i := range 4 { // two each from two addresses fill the per-address cap; 5 more each are refused
		for range 7 {
			dial(fmt.Sprintf("127.0.0.%d", 1+i%2))
		}
	}
	for i := range 6 { // four more addresses: two fit under max_connections, the rest are refused
		dial(fmt.Sprintf("127.0.1.%d", i))
	}
	l.Close()
	for c := range accepted {
		c.Close()
	}
	for _, c := range clients {
		c.Close()
	}
	perIP := testutil.ToFloat64(m.refused.WithLabelValues("unauthenticated_per_ip"))
	full := testutil.ToFloat64(m.refused.WithLabelValues("max_connections"))
	got := sum(out.refusalLines(t))
	if perIP == 0 || full == 0 || float64(got["unauthenticated_per_ip"]) != perIP || float64(got["max_connections"]) != full {
		t.Errorf("logged %v, counted unauthenticated_per_ip %v and max_connections %v: want both, equal", got, perIP, full)
	}
}
