// Package fleet runs several gateway replicas on loopback behind a
// round-robin balancer, in front of one mock provider whose calls in flight
// are counted: the harness of the cluster tests and of the figures in
// docs/perf.md ("several replicas, one provider"). Everything is the real
// package — gateway.New and Listen, mockllm, loadgen, a real Redis — in one
// process; a replica can also run as a child process (the test binary run
// again), so that a test can kill -9 it.
//
// It is internal because it is a program, not a library.
package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/loopback"
	"github.com/sluicehq/sluice/mockllm"
)

// Provider is a mock provider behind a counter of the calls in its
// handler: in service or queued at the provider, which is what a
// provider's concurrency limit counts.
type Provider struct {
	URL  string
	Mock *mockllm.Server
	stop func()

	inFlight, peak atomic.Int64
	// items counts the calls whose body names a batch item (ItemMarker).
	items struct {
		sync.Mutex
		n map[string]int
	}
	// busy integrates min(in flight, slots) over time, for the share of
	// the provider's capacity kept busy.
	mu struct {
		sync.Mutex
		last    time.Time
		busyNS  float64
		started time.Time
	}
	slots int
}

// StartProvider serves a mockllm with cfg on a free loopback port.
func StartProvider(cfg mockllm.Config) (*Provider, error) {
	m, err := mockllm.New(cfg)
	if err != nil {
		return nil, err
	}
	p := &Provider{Mock: m, slots: cfg.Slots}
	p.mu.last, p.mu.started = time.Now(), time.Now()
	u, stop, err := loopback.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.account(1)
		defer p.account(-1)
		if r.Body != nil {
			if b, err := io.ReadAll(r.Body); err == nil {
				p.countItems(b)
				r.Body = io.NopCloser(bytes.NewReader(b))
			}
		}
		m.ServeHTTP(w, r)
	}), 0)
	if err != nil {
		m.Close()
		return nil, err
	}
	p.URL, p.stop = u, func() { m.Close(); stop() }
	return p, nil
}

func (p *Provider) account(d int64) {
	p.mu.Lock()
	now := time.Now()
	n := p.inFlight.Load()
	if p.slots > 0 {
		p.mu.busyNS += float64(min(n, int64(p.slots))) * float64(now.Sub(p.mu.last))
	}
	p.mu.last = now
	n = p.inFlight.Add(d)
	p.mu.Unlock()
	for {
		pk := p.peak.Load()
		if n <= pk || p.peak.CompareAndSwap(pk, n) {
			return
		}
	}
}

// ItemMarker starts the name of a batch item in a call's prompt: the
// provider counts the calls of each such name (ItemCalls), so that a test
// can tell an item run twice from one run once.
const ItemMarker = "fleet-item-"

func (p *Provider) countItems(body []byte) {
	for {
		i := bytes.Index(body, []byte(ItemMarker))
		if i < 0 {
			return
		}
		body = body[i:]
		end := bytes.IndexFunc(body[len(ItemMarker):], func(r rune) bool {
			return !(r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z')
		})
		if end < 0 {
			end = len(body) - len(ItemMarker)
		}
		name := string(body[:len(ItemMarker)+end])
		p.items.Lock()
		if p.items.n == nil {
			p.items.n = map[string]int{}
		}
		p.items.n[name]++
		p.items.Unlock()
		body = body[len(name):]
	}
}

// ItemCalls is how many calls named each batch item (see ItemMarker).
func (p *Provider) ItemCalls() map[string]int {
	p.items.Lock()
	defer p.items.Unlock()
	return maps.Clone(p.items.n)
}

// InFlight is the calls in the provider's handler now.
func (p *Provider) InFlight() int { return int(p.inFlight.Load()) }

// Peak is the most calls in the provider's handler at once since the last
// Reset.
func (p *Provider) Peak() int { return int(p.peak.Load()) }

// Reset starts a new measurement: the peak and the busy share.
func (p *Provider) Reset() {
	p.mu.Lock()
	p.mu.busyNS, p.mu.last, p.mu.started = 0, time.Now(), time.Now()
	p.mu.Unlock()
	p.peak.Store(p.inFlight.Load())
}

// Busy is the share of the provider's slot-time in use since the last
// Reset: 1 when every slot was busy all the time.
func (p *Provider) Busy() float64 {
	p.account(0)
	p.mu.Lock()
	defer p.mu.Unlock()
	span := time.Since(p.mu.started)
	if p.slots == 0 || span <= 0 {
		return 0
	}
	return p.mu.busyNS / (float64(p.slots) * float64(span))
}

// Close stops the provider.
func (p *Provider) Close() { p.stop() }

// Replica is one gateway on loopback.
type Replica struct {
	G          *gateway.Gateway
	URL, Admin string
	cancel     context.CancelFunc
	done       chan error
}

// StartReplica builds a gateway from cfg and serves it on free loopback
// ports until Stop. A nil log discards the gateway's logs.
func StartReplica(cfg config.Config, log *slog.Logger) (*Replica, error) {
	cfg.Listen, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0"
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g, err := gateway.New(cfg, gateway.Options{Logger: log})
	if err != nil {
		return nil, err
	}
	srv, err := gateway.Listen(g)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Replica{G: g, URL: "http://" + srv.API.Addr().String(), Admin: "http://" + srv.Admin.Addr().String(),
		cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- srv.Serve(ctx) }()
	return r, nil
}

// Stop shuts the replica down gracefully (its lease is released).
func (r *Replica) Stop() error {
	r.cancel()
	return <-r.done
}

// Cluster is the part of a replica's state dump this package reads.
type Cluster struct {
	Mode        string `json:"mode"`
	Slots       int    `json:"slots"`
	Lease       int    `json:"lease"`
	Concurrency int    `json:"concurrency"`
	Replicas    int    `json:"replicas"`
}

// ClusterState reads the cluster part of the state dump at an admin URL;
// nil when the replica does not lease.
func ClusterState(admin string) (*Cluster, error) {
	resp, err := http.Get(admin + "/admin/v1/state")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var st struct {
		Store *struct {
			Cluster *Cluster `json:"cluster"`
		} `json:"store"`
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	if st.Store == nil {
		return nil, nil
	}
	return st.Store.Cluster, nil
}

// Balancer is a round-robin reverse proxy over backends, the part of a
// load balancer that matters here. A backend marked down is skipped, as a
// balancer's health check would.
type Balancer struct {
	URL  string
	stop func()
	next atomic.Uint64
	mu   sync.Mutex
	up   []*url.URL
	down map[int]bool
	all  []*url.URL
}

// StartBalancer serves a balancer over backends on a free loopback port.
func StartBalancer(backends []string) (*Balancer, error) {
	b := &Balancer{down: map[int]bool{}}
	for _, s := range backends {
		u, err := url.Parse(s)
		if err != nil {
			return nil, err
		}
		b.all = append(b.all, u)
	}
	b.up = b.all
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			b.mu.Lock()
			up := b.up
			b.mu.Unlock()
			pr.SetURL(up[int(b.next.Add(1)-1)%len(up)])
			pr.Out.Host = pr.In.Host
		},
		Transport: &http.Transport{MaxIdleConnsPerHost: 1024, MaxIdleConns: 4096, IdleConnTimeout: 30 * time.Second},
		ErrorLog:  slog.NewLogLogger(slog.DiscardHandler, slog.LevelError),
	}
	u, stop, err := loopback.Serve(proxy, 0)
	if err != nil {
		return nil, err
	}
	b.URL, b.stop = u, stop
	return b, nil
}

// Down takes backend i out of the rotation.
func (b *Balancer) Down(i int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.down[i] = true
	var up []*url.URL
	for j, u := range b.all {
		if !b.down[j] {
			up = append(up, u)
		}
	}
	b.up = up
}

// Close stops the balancer.
func (b *Balancer) Close() { b.stop() }
