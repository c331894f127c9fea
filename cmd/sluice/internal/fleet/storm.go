package fleet

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/gateway/guard"
	"github.com/sluicehq/sluice/loadgen"
	"github.com/sluicehq/sluice/mockllm"
)

// ReplicaConfig is a replica's configuration: concurrency slots (the
// cluster's with a Redis URL, its own without), leases renewed every
// 100ms, Redis calls bounded by 250ms (the shared test machine's pauses
// must not open the breaker), and connection caps that let a balancer's
// many connections from one address through.
func ReplicaConfig(upstream string, concurrency int, redisURL, cluster string) config.Config {
	cfg := config.Config{
		Upstream:  config.UpstreamConfig{URL: upstream},
		Admission: config.AdmissionConfig{Concurrency: concurrency},
		Server:    guard.Config{MaxConnections: 8192, MaxUnauthenticatedPerIP: 8192},
	}
	if redisURL != "" {
		cfg.Store = &config.StoreConfig{Redis: &config.RedisStoreConfig{URL: redisURL, Cluster: cluster,
			Timeout: config.Duration(250 * time.Millisecond),
			Lease:   &config.LeaseConfig{Interval: config.Duration(100 * time.Millisecond)}}}
	}
	return cfg
}

// Options shape a storm against a fleet.
type Options struct {
	// Replicas is how many gateways; zero means 3.
	Replicas int
	// Slots is the provider's and the configured concurrency; zero means 16.
	Slots int
	// Median is the provider's service time (lognormal, sigma 0.2); zero
	// means 300ms.
	Median time.Duration
	// Load is the storm's rate as a multiple of capacity (Slots ÷ Median);
	// zero means 5.
	Load float64
	// Duration bounds the storm's arrivals; zero means 6s.
	Duration time.Duration
	// RedisURL shares the concurrency among the replicas; empty gives each
	// replica all Slots, as replicas without a store have.
	RedisURL, Cluster string
	// Log receives the gateways' logs; nil discards them.
	Log *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Replicas == 0 {
		o.Replicas = 3
	}
	if o.Slots == 0 {
		o.Slots = 16
	}
	if o.Median == 0 {
		o.Median = 300 * time.Millisecond
	}
	if o.Load == 0 {
		o.Load = 5
	}
	if o.Duration == 0 {
		o.Duration = 6 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o
}

// sigma is the spread of the provider's lognormal service time.
const sigma = 0.2

// Capacity is the provider's answers per second at full use: Slots ÷ the
// mean service time (Median × e^(σ²/2)).
func (o Options) Capacity() float64 {
	o = o.withDefaults()
	return float64(o.Slots) / (o.Median.Seconds() * math.Exp(sigma*sigma/2))
}

// mock is the provider's configuration: Slots slots, a FIFO beyond them
// (the provider takes every call, as one without a rate limit would), a
// lognormal service time around Median for every model.
func (o Options) mock() mockllm.Config {
	o = o.withDefaults()
	return mockllm.Config{Slots: o.Slots, Median: o.Median, Sigma: sigma, Seed: 1,
		Models: map[string]mockllm.ModelSpec{mockllm.DefaultModelKey: {LatencyFactor: 1}}}
}

// Figures are one storm's results.
type Figures struct {
	Replicas int
	Shared   bool
	Slots    int
	Rate     float64 // arrivals per second
	Capacity float64 // answers per second at full use (Options.Capacity)
	// Peak is the most calls the provider had at once.
	Peak int
	// Busy is the share of the provider's slot-time in use over the storm
	// after its first service time (the ramp), Goodput the on-time answers
	// per second over the whole storm, as a share of Capacity.
	Busy, Goodput float64
	// Billed is the calls the provider started, Wasted those of them
	// nobody received or that were cut (aborted).
	Billed, Wasted int64
	// Errors5xx counts answers 5xx without a sluice reason: what no
	// overload rule decided (a broken proxy, a Redis fault).
	Errors5xx int
	Report    *loadgen.Report
}

// Fleet is a provider, replicas and a balancer.
type Fleet struct {
	Provider *Provider
	Replicas []*Replica
	Balancer *Balancer
}

// Start runs o's fleet: the provider, the replicas and the balancer.
func Start(o Options) (*Fleet, error) {
	o = o.withDefaults()
	p, err := StartProvider(o.mock())
	if err != nil {
		return nil, err
	}
	f := &Fleet{Provider: p}
	var urls []string
	for range o.Replicas {
		r, err := StartReplica(ReplicaConfig(p.URL, o.Slots, o.RedisURL, o.Cluster), o.Log)
		if err != nil {
			f.Close()
			return nil, err
		}
		f.Replicas = append(f.Replicas, r)
		urls = append(urls, r.URL)
	}
	if f.Balancer, err = StartBalancer(urls); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Close stops everything Start started.
func (f *Fleet) Close() {
	if f.Balancer != nil {
		f.Balancer.Close()
	}
	for _, r := range f.Replicas {
		if r != nil {
			_ = r.Stop()
		}
	}
	f.Provider.Close()
}

// WaitShared waits until every replica holds a shared lease and the
// leases add up to the cluster's slots (no replica still on its joining
// slot): the fleet is settled.
func (f *Fleet) WaitShared(ctx context.Context, slots int) error {
	for {
		sum, ok := 0, true
		for _, r := range f.Replicas {
			c, err := ClusterState(r.Admin)
			if err != nil || c == nil || c.Mode != "shared" || c.Replicas != len(f.Replicas) {
				ok = false
				break
			}
			sum += c.Slots
		}
		if ok && sum == slots {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the fleet did not settle on shared leases: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Storm sends a retry storm at target: rate arrivals a second for d, every
// caller interactive with a 5s deadline and retrying at once on any
// refusal (loadgen's Naive client, 3 attempts of 2.5s at most).
func Storm(ctx context.Context, target string, rate float64, d time.Duration, seed uint64) (*loadgen.Report, error) {
	return loadgen.Run(ctx, loadgen.Config{
		Target: target, Rate: rate, Duration: d, Seed: seed,
		Classes:     []loadgen.Class{{Name: "interactive", Weight: 1, Deadline: 5 * time.Second}},
		Policy:      loadgen.Naive{},
		MaxInFlight: 4000,
	})
}

// Run starts o's fleet, sends the storm through the balancer and returns
// the figures.
func Run(ctx context.Context, o Options) (*Figures, error) {
	o = o.withDefaults()
	f, err := Start(o)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if o.RedisURL != "" {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := f.WaitShared(wctx, o.Slots)
		cancel()
		if err != nil {
			return nil, err
		}
	}
	capacity := o.Capacity()
	fig := &Figures{Replicas: o.Replicas, Shared: o.RedisURL != "", Slots: o.Slots, Rate: o.Load * capacity, Capacity: capacity}
	before := f.Provider.Mock.Stats()
	f.Provider.Reset()
	// The provider's busy share is measured once the ramp (one service
	// time) is over, and until the arrivals stop.
	busy := make(chan float64, 1)
	go func() {
		select {
		case <-time.After(o.Median):
		case <-ctx.Done():
		}
		f.Provider.Reset()
		select {
		case <-time.After(o.Duration - o.Median):
		case <-ctx.Done():
		}
		busy <- f.Provider.Busy()
	}()
	peakAll := 0
	stopPeak := make(chan struct{})
	peakDone := make(chan struct{})
	go func() { // Reset above clears the peak: keep the storm's own
		defer close(peakDone)
		for {
			peakAll = max(peakAll, f.Provider.Peak())
			select {
			case <-stopPeak:
				peakAll = max(peakAll, f.Provider.Peak())
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	rep, err := Storm(ctx, f.Balancer.URL, fig.Rate, o.Duration, 7)
	close(stopPeak)
	<-peakDone
	if err != nil {
		return nil, err
	}
	fig.Busy = <-busy
	fig.Report, fig.Peak = rep, peakAll
	fig.Goodput = rep.Goodput / capacity
	after := f.Provider.Mock.Stats()
	fig.Billed = after.Started - before.Started
	fig.Wasted = (after.Wasted - before.Wasted) + (after.Aborted - before.Aborted)
	fig.Errors5xx = Unexplained5xx(rep)
	return fig, nil
}

// Unexplained5xx counts the attempts answered 5xx without a sluice reason
// (loadgen records a status code as the reason when there is none): what
// no overload rule decided, such as a broken proxy or a Redis fault. A 504
// is left out: the gateway's answer when the caller's own deadline passed
// while the provider worked on an admitted call (deadline_exceeded), which
// a provider slower than its estimates causes, whatever Redis does.
func Unexplained5xx(rep *loadgen.Report) int {
	n := 0
	for reason, c := range rep.Rejections {
		if len(reason) == 3 && strings.HasPrefix(reason, "5") && reason != "504" {
			n += c
		}
	}
	return n
}

// String is one line of the figures.
func (f *Figures) String() string {
	store := "without a store"
	if f.Shared {
		store = "leases on Redis"
	}
	waste := 0.0
	if f.Billed > 0 {
		waste = float64(f.Wasted) / float64(f.Billed)
	}
	return fmt.Sprintf("%d replicas, %s: %d slots, %.0f/s offered (%.1f× capacity): provider peak in flight %d, busy %.1f%%, goodput %.1f%% of capacity, billed %d, wasted %.2f%%, unexplained 5xx %d",
		f.Replicas, store, f.Slots, f.Rate, f.Rate/f.Capacity, f.Peak, 100*f.Busy, 100*f.Goodput, f.Billed, 100*waste, f.Errors5xx)
}
