package cluster

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redistest"
)

// fakePools is a gateway's pools as a Lease sees them: n pools whose
// adaptive limit is at level, one rank, nothing queued.
type fakePools struct {
	n     int
	level int

	mu     sync.Mutex
	slots  int   // the first pool's concurrency, as SetConcurrency left it
	shares []int // the replicas each Share divided by
}

func (p *fakePools) Len() int            { return p.n }
func (p *fakePools) Level(time.Time) int { return p.level }
func (p *fakePools) Stats() admission.Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return admission.Stats{Concurrency: p.slots, Depth: []int{0}, InFlightByRank: []int{0}}
}
func (p *fakePools) SetConcurrency(n int) { p.mu.Lock(); p.slots = n; p.mu.Unlock() }
func (p *fakePools) Share(_ time.Time, n int) {
	p.mu.Lock()
	p.shares = append(p.shares, n)
	p.mu.Unlock()
}
func (p *fakePools) get() (int, []int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.slots, slices.Clone(p.shares)
}

func redisStore(t *testing.T, url string) *config.StoreConfig {
	return &config.StoreConfig{Redis: &config.RedisStoreConfig{URL: url, Cluster: strings.ReplaceAll(t.Name(), "/", "-"),
		Timeout: config.Duration(time.Second), Lease: &config.LeaseConfig{Interval: config.Duration(20 * time.Millisecond)}}}
}

// run runs b until the test ends.
func run(t *testing.T, b *Books) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestStateJSON pins the state dump's field names: the gateway serves
// them at /admin/v1/state and the fleet harness reads them.
func TestStateJSON(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	raw, err := json.Marshal(StoreState{Mode: "redis", Up: true, LastErrorAt: &at, Queued: 1, Dropped: 2, Snapshot: "p",
		Cluster: &ClusterState{Replica: "r", Mode: "shared", Slots: 3, Lease: 4, Target: 5, Concurrency: 6, Replicas: 7, RenewedAt: &at}})
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"mode":"redis","up":true,"last_error_at":"2025-01-02T03:04:05Z","queued":1,"dropped":2,"snapshot":"p",` +
		`"cluster":{"replica":"r","mode":"shared","slots":3,"lease":4,"target":5,"concurrency":6,"replicas":7,"renewed_at":"2025-01-02T03:04:05Z"}}`
	if string(raw) != want {
		t.Errorf("state:\n%s\nwant:\n%s", raw, want)
	}
	if raw, _ := json.Marshal(StoreState{Mode: "local", Up: true}); string(raw) != `{"mode":"local","up":true,"queued":0}` {
		t.Errorf("local state: %s", raw)
	}
}

// TestBooksWithoutStore: no store section, no books of their own, no
// state unless spending, and Run returns at once.
func TestBooksWithoutStore(t *testing.T) {
	b := NewBooks(nil, nil, nil)
	if l, err := b.OpenLedger(); l != nil || err != nil {
		t.Fatalf("OpenLedger without a store: %v, %v", l, err)
	}
	if err := b.OpenLease(&fakePools{n: 1, level: 4}); err != nil || b.Lease() != nil {
		t.Fatalf("OpenLease without a store: %v, %v", b.Lease(), err)
	}
	if r, err := b.Redis(); r != nil || err != nil {
		t.Fatalf("Redis without a store: %v, %v", r, err)
	}
	if b.AlertClaim() != nil {
		t.Error("an alert claim without Redis")
	}
	if s := b.State(false); s != nil {
		t.Errorf("state without spending: %+v", s)
	}
	if s := b.State(true); s == nil || s.Mode != "local" || !s.Up || s.Snapshot != "" {
		t.Errorf("state spending: %+v", s)
	}
	if err := b.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestBooksSnapshot: the snapshot is read at OpenLedger — a corrupt one
// is an error naming store.snapshot.path — and written when Run ends.
func TestBooksSnapshot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "books.json")
	c := &config.StoreConfig{Snapshot: &config.SnapshotConfig{Path: path}}
	b := NewBooks(c, nil, nil)
	if l, err := b.OpenLedger(); l == nil || err != nil {
		t.Fatalf("OpenLedger: %v, %v", l, err)
	}
	if s := b.State(true); s == nil || s.Mode != "local" || s.Snapshot != path {
		t.Errorf("state %+v, want local with the snapshot", s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no snapshot written at the end: %v", err)
	}
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewBooks(c, nil, nil).OpenLedger(); err == nil || !strings.Contains(err.Error(), "store.snapshot.path") || !strings.Contains(err.Error(), path) {
		t.Errorf("a corrupt snapshot: %v", err)
	}
}

// TestPasswordEnv: an unset password variable is an error naming
// store.redis.password_env, and getenv is what reads it.
func TestPasswordEnv(t *testing.T) {
	c := redisStore(t, "redis://127.0.0.1:1")
	c.Redis.PasswordEnv = "SLUICE_TEST_PASSWORD"
	if err := NewBooks(c, func(string) string { return "" }, nil).OpenLease(&fakePools{n: 1}); err == nil || !strings.Contains(err.Error(), "store.redis.password_env") {
		t.Errorf("an unset password variable: %v", err)
	}
	b := NewBooks(c, func(k string) string { return map[string]string{"SLUICE_TEST_PASSWORD": "x"}[k] }, nil)
	r, err := b.Redis()
	if err != nil || r == nil {
		t.Fatalf("with the password set: %v, %v", r, err)
	}
	r.Close()
}

// TestLeaseStartsOnOneSlotAndFallsBack: with a Redis that never answers,
// the gate gets one slot at once, then the local share (16 ÷ 2, the
// default replicas), in mode local, with sluice_cluster_local_share 1.
func TestLeaseStartsOnOneSlotAndFallsBack(t *testing.T) {
	p := &fakePools{n: 1, level: 16}
	b := NewBooks(redisStore(t, "redis://127.0.0.1:1"), nil, nil)
	if err := b.OpenLease(p); err != nil {
		t.Fatal(err)
	}
	if slots, _ := p.get(); slots != 1 {
		t.Fatalf("before the first lease the gate has %d slots, want 1", slots)
	}
	if s := b.State(false); s == nil || s.Cluster == nil || s.Cluster.Mode != "joining" {
		t.Fatalf("state before the first renewal: %+v", s)
	}
	reg := prometheus.NewRegistry()
	b.Register(reg)
	run(t, b)
	testkit.Eventually(t, "the local share", func() bool {
		slots, _ := p.get()
		c := b.Lease().State()
		return slots == 8 && c.Mode == "local" && c.Slots == 8
	})
	if s := b.State(false); s.Mode != "degraded" || s.Up {
		t.Errorf("store state %+v, want degraded", s)
	}
	if v := testutil.ToFloat64(b.Lease().local); v != 1 {
		t.Errorf("sluice_cluster_local_share %v, want 1", v)
	}
	if n, err := testutil.GatherAndCount(reg, "sluice_cluster_lease_slots", "sluice_store_up"); err != nil || n != 2 {
		t.Errorf("registered metrics: %d, %v", n, err)
	}
}

// TestLeasesShareTheConcurrency: two replicas on one Redis divide the
// cluster's 16 slots, 8 each; when one leaves (releasing its row), the
// other takes all 16. Their ids are distinct rows, and the batch owner is
// the row.
func TestLeasesShareTheConcurrency(t *testing.T) {
	rs := redistest.Start(t)
	c := redisStore(t, rs.URL())
	pa, pb := &fakePools{n: 1, level: 16}, &fakePools{n: 1, level: 16}
	a, b := NewBooks(c, nil, nil), NewBooks(c, nil, nil)
	for _, x := range []struct {
		b *Books
		p *fakePools
	}{{a, pa}, {b, pb}} {
		if err := x.b.OpenLease(x.p); err != nil {
			t.Fatal(err)
		}
	}
	if a.Lease().ID() == b.Lease().ID() || a.Owner() != a.Lease().ID() {
		t.Fatalf("ids %q, %q, owner %q", a.Lease().ID(), b.Lease().ID(), a.Owner())
	}
	run(t, a)
	ctx, stopB := context.WithCancel(context.Background())
	doneB := make(chan error, 1)
	go func() { doneB <- b.Run(ctx) }()
	testkit.Eventually(t, "two leases of 8", func() bool {
		sa, _ := pa.get()
		sb, _ := pb.get()
		ca, cb := a.Lease().State(), b.Lease().State()
		return sa == 8 && sb == 8 && ca.Mode == "shared" && cb.Mode == "shared" && ca.Replicas == 2 && ca.Concurrency == 16
	})
	if s := a.State(false); s.Mode != "redis" || !s.Up || s.Cluster == nil || s.Cluster.RenewedAt == nil {
		t.Errorf("store state %+v", s)
	}
	stopB()
	if err := <-doneB; err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the one left takes all 16", func() bool { sa, _ := pa.get(); return sa == 16 })
}

// TestLeaseDividesSeveralPools: with several pools nothing is leased slot
// by slot: each pool's limits are divided by the live replicas, which
// LimitChanged does not change.
func TestLeaseDividesSeveralPools(t *testing.T) {
	rs := redistest.Start(t)
	c := redisStore(t, rs.URL())
	p := &fakePools{n: 2, level: 16}
	b := NewBooks(c, nil, nil)
	if err := b.OpenLease(p); err != nil {
		t.Fatal(err)
	}
	if b.Lease().Leasing() {
		t.Fatal("leasing with two pools")
	}
	if n := b.Lease().Replicas(); n != 2 {
		t.Errorf("replicas before the first renewal: %d, want the default 2", n)
	}
	run(t, b)
	testkit.Eventually(t, "the pools divided by the one live replica", func() bool {
		_, shares := p.get()
		return len(shares) > 0 && shares[len(shares)-1] == 1 && b.Lease().Replicas() == 1
	})
	b.Lease().LimitChanged(8)
	time.Sleep(100 * time.Millisecond)
	if _, shares := p.get(); !slices.Equal(shares, []int{1}) {
		t.Errorf("shares %v, want one division by 1", shares)
	}
}

func TestReplicaID(t *testing.T) {
	id, other := ReplicaID(), ReplicaID()
	if !regexp.MustCompile(`^[A-Za-z0-9_.-]{0,40}-[0-9]+-[0-9a-f]{8}$`).MatchString(id) || id == other {
		t.Errorf("replica ids %q, %q", id, other)
	}
}

// TestLeaseRejoinWaitsForTheOthersToRenew: two replicas on 8 slots each
// lose Redis; A gets it back first while B is still away on its local
// share of 8. B's row, renewed before the outage, is still in the table
// when A returns — but a row that is merely live does not say B is back:
// when it expires A must not take the 16 while B still uses its 8. A
// stays at its share until B renews after A's return (or a TTL after
// it), then they divide the 16 again. Time is an input: renew is called
// with it, the table and the breaker run on it; Redis is real.
func TestLeaseRejoinWaitsForTheOthersToRenew(t *testing.T) {
	rs := redistest.Start(t)
	t0 := time.Now()
	var clock struct {
		sync.Mutex
		at time.Time
	}
	clock.at = t0
	now := func() time.Time { clock.Lock(); defer clock.Unlock(); return clock.at }
	at := func(ms int) time.Time {
		clock.Lock()
		defer clock.Unlock()
		clock.at = t0.Add(time.Duration(ms) * time.Millisecond)
		return clock.at
	}
	cfg := redisStore(t, rs.URL())
	type replica struct {
		l *Lease
		p *fakePools
	}
	var a, b replica
	for _, x := range []*replica{&a, &b} {
		x.p = &fakePools{n: 1, level: 16}
		books := NewBooks(cfg, nil, nil)
		if err := books.OpenLease(x.p); err != nil {
			t.Fatal(err)
		}
		client, err := store.NewClient(store.ClientOptions{URL: rs.URL(), Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		r, err := store.NewRedis(store.Options{Client: client, Cluster: cfg.Redis.Cluster, Timeout: time.Second, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		books.redis.Close()
		x.l = books.Lease()
		x.l.redis, x.l.leases, x.l.tableClock = r, store.NewLeases(r), true
	}
	ctx := t.Context()
	slots := func(x replica) int { s, _ := x.p.get(); return s }
	renew := func(x replica, ms int) int { x.l.renew(ctx, at(ms)); return slots(x) }

	renew(a, 0)
	renew(b, 10)
	renew(a, 100) // A's gate gives up 8 of its 16; B gets them next
	renew(b, 110)
	if sa, sb := renew(a, 200), renew(b, 210); sa != 8 || sb != 8 {
		t.Fatalf("before the outage: %d and %d slots, want 8 and 8", sa, sb)
	}
	rs.Stop()
	for i := range 3 { // three failures open each breaker
		renew(a, 400+i)
		renew(b, 410+i)
	}
	if ma, mb := a.l.State().Mode, b.l.State().Mode; ma != "held" || mb != "held" {
		t.Fatalf("Redis away: modes %s and %s, want held", ma, mb)
	}
	rs.Restart()
	// A is back at 1000ms (its breaker's probe), B not yet: its last
	// renewal was at 210ms, its row lives until 3210ms; its lease has
	// expired by then and B runs on its local share of 8.
	if s := renew(a, 1000); s != 8 || a.l.State().Mode != "shared" {
		t.Fatalf("A back: %d slots in mode %s, want 8 shared", s, a.l.State().Mode)
	}
	renew(a, 1200)
	if s := renew(a, 3300); s != 8 {
		t.Errorf("A after B's stale row expired, B still on its share of 8: %d slots, want 8", s)
	}
	// B back: it renews after A's return; the next renewals divide the
	// 16 again, 8 and 8 with no demand, and A's cap is lifted.
	renew(b, 3400)
	renew(a, 3500)
	renew(b, 3600)
	if sa, sb := renew(a, 3700), renew(b, 3710); sa != 8 || sb != 8 || a.l.mu.rejoin || b.l.mu.rejoin {
		t.Errorf("both back: %d and %d slots (rejoining %v, %v), want 8 and 8 on the table", sa, sb, a.l.mu.rejoin, b.l.mu.rejoin)
	}
	// B leaves for good (its row released): A alone takes the 16.
	if err := b.l.leases.Release(ctx, b.l.id); err != nil {
		t.Fatal(err)
	}
	if s := renew(a, 3900); s != 16 {
		t.Errorf("A alone: %d slots, want 16", s)
	}
}
