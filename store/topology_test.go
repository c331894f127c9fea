package store

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/store/redistest"
)

// caller calls Redis through r every 10ms, as the ledger's and the
// lease's loops do, and keeps when each call succeeded.
type caller struct {
	r        *Redis
	key      string
	stop     chan struct{}
	stopOnce sync.Once
	done     sync.WaitGroup

	mu sync.Mutex
	ok []time.Time
}

func startCaller(r *Redis) *caller {
	c := &caller{r: r, key: r.Key("probe"), stop: make(chan struct{})}
	c.done.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-tick.C:
			}
			err := r.Do(context.Background(), func(ctx context.Context, cl redis.UniversalClient) error {
				return cl.Incr(ctx, c.key).Err()
			})
			if err == nil {
				c.mu.Lock()
				c.ok = append(c.ok, time.Now())
				c.mu.Unlock()
			}
		}
	})
	return c
}

func (c *caller) Stop() {
	c.stopOnce.Do(func() { close(c.stop) })
	c.done.Wait()
}

// calling starts a caller through r, stopped at the end of the test, and
// waits for its first success.
func calling(t *testing.T, r *Redis) *caller {
	t.Helper()
	c := startCaller(r)
	t.Cleanup(c.Stop)
	if _, ok := c.firstOKAfter(time.Now(), 5*time.Second); !ok {
		t.Fatal("no call succeeded on the healthy deployment")
	}
	return c
}

// onCluster starts a Cluster and a caller through it, and returns the
// shard serving the caller's key.
func onCluster(t *testing.T) (*redistest.Cluster, *Redis, *caller, redistest.Shard) {
	t.Helper()
	cl := redistest.StartCluster(t)
	r := newTopologyRedis(t, ClientOptions{ClusterAddrs: cl.Addrs()})
	c := calling(t, r)
	sh, err := cl.ShardOf(c.key)
	if err != nil {
		t.Fatal(err)
	}
	return cl, r, c, sh
}

// firstOKAfter waits up to limit for a call that succeeded after t.
func (c *caller) firstOKAfter(t time.Time, limit time.Duration) (time.Duration, bool) {
	deadline := time.Now().Add(limit)
	for {
		c.mu.Lock()
		i, _ := slices.BinarySearchFunc(c.ok, t, func(a, b time.Time) int { return a.Compare(b) })
		var at time.Time
		if i < len(c.ok) {
			at = c.ok[i]
		}
		c.mu.Unlock()
		if !at.IsZero() {
			return at.Sub(t), true
		}
		if time.Now().After(deadline) {
			return 0, false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newTopologyRedis(t *testing.T, o ClientOptions) *Redis {
	t.Helper()
	client, err := NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRedis(Options{Client: client, Cluster: "topology"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestClusterFailoverSurvived: a real Redis Cluster (three primaries
// with a replica each) loses the primary of the fleet's slot to SIGKILL,
// three times over (the killed node restarted as a replica between
// kills). Each time the calls succeed again within 2s of the cluster's
// own recovery — its replica promoted — though the killed node's address
// refuses connections: the slot map is refreshed on failures, not only
// once a minute.
func TestClusterFailoverSurvived(t *testing.T) {
	cl, _, c, sh := onCluster(t)
	var backs []time.Duration
	for kill := range 3 {
		if kill > 0 {
			var err error
			if sh, err = cl.ShardOf(c.key); err != nil {
				t.Fatal(err)
			}
		}
		killed := time.Now()
		sh.Primary.Kill()
		_, recovered := redistest.Promoted(t, 15*time.Second, sh.Replicas...)
		t.Logf("kill %d: promoted %v after", kill+1, recovered.Sub(killed).Round(time.Millisecond))
		back, ok := c.firstOKAfter(recovered, 10*time.Second)
		if !ok {
			t.Fatalf("kill %d: no call succeeded within 10s of the replica's promotion", kill+1)
		}
		backs = append(backs, back)
		sh.Primary.Restart()
		cl.WaitReplicated()
	}
	t.Logf("calls back %v after each promotion (median %v)", backs, median(backs))
	if m := median(backs); m > 2*time.Second {
		t.Errorf("calls back a median %v after the promotion, want within 2s", m)
	}
}

// TestClusterPrimaryHungSurvived: the primary of the fleet's slot stops
// answering without closing anything (SIGSTOP, as a host gone dark):
// calls to it time out rather than being refused. The cluster promotes
// its replica after the node timeout, and the calls succeed again within
// 2s of that; once the old primary resumes, it is a replica and the calls
// go on.
func TestClusterPrimaryHungSurvived(t *testing.T) {
	cl, _, c, sh := onCluster(t)
	sh.Primary.Pause()
	_, recovered := redistest.Promoted(t, 15*time.Second, sh.Replicas...)
	back, ok := c.firstOKAfter(recovered, 10*time.Second)
	if !ok {
		t.Fatal("no call succeeded within 10s of the replica's promotion")
	}
	sh.Primary.Resume()
	cl.WaitReplicated()
	again, ok := c.firstOKAfter(time.Now(), 5*time.Second)
	t.Logf("calls back %v after the promotion; %v after the old primary resumed as a replica", back, again)
	if back > 2*time.Second {
		t.Errorf("calls back %v after the promotion, want within 2s", back)
	}
	if !ok {
		t.Error("no call succeeded within 5s once the old primary resumed")
	}
}

// TestClusterPrimaryRestartedInPlace: the primary of the fleet's slot is
// stopped and started again on its port before the cluster fails it over
// (a restart for an upgrade). The client's pooled connections to it are
// dead; the calls succeed again within 2s of its answering.
func TestClusterPrimaryRestartedInPlace(t *testing.T) {
	_, _, c, sh := onCluster(t)
	sh.Primary.Stop()
	sh.Primary.Restart()
	primary, recovered := redistest.Promoted(t, 15*time.Second, append([]*redistest.Server{sh.Primary}, sh.Replicas...)...)
	back, ok := c.firstOKAfter(recovered, 10*time.Second)
	if !ok {
		t.Fatal("no call succeeded within 10s of the restart")
	}
	t.Logf("calls back %v after the restarted primary answered (primary now: the restarted node %v)", back, primary == sh.Primary)
	if back > 2*time.Second {
		t.Errorf("calls back %v after the restart, want within 2s", back)
	}
}

// TestClusterNodeAdded: a fourth primary joins the cluster and the
// fleet's slot moves to it, keys and all. The client follows the MOVED
// answers to the new node: the calls succeed within 2s of the move, and
// the counter the calls increment kept every increment.
func TestClusterNodeAdded(t *testing.T) {
	cl, r, c, _ := onCluster(t)
	n := cl.AddNode(c.key)
	moved := time.Now()
	back, ok := c.firstOKAfter(moved, 10*time.Second)
	if !ok {
		t.Fatal("no call succeeded within 10s of the slot's move")
	}
	sh, err := cl.ShardOf(c.key)
	if err != nil || sh.Primary != n {
		t.Fatalf("the slot is not on the new node: %v %v", sh.Primary, err)
	}
	c.Stop()
	c.mu.Lock()
	calls := len(c.ok)
	c.mu.Unlock()
	var got int
	if err := r.Do(t.Context(), func(ctx context.Context, cl redis.UniversalClient) error {
		var err error
		got, err = cl.Get(ctx, c.key).Int()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("calls back %v after the slot moved to the new node; %d increments, the counter says %d", back, calls, got)
	if back > 2*time.Second {
		t.Errorf("calls back %v after the move, want within 2s", back)
	}
	if got != calls {
		t.Errorf("the counter is %d after %d successful increments", got, calls)
	}
}

// TestSentinelFailoverSurvived: a real Sentinel deployment (a primary, its
// replica, three Sentinels) loses its primary to SIGKILL three times over
// (the killed node restarted as a replica between kills). Each time the
// calls succeed again within 2s of the Sentinels' naming the promoted
// replica.
func TestSentinelFailoverSurvived(t *testing.T) {
	st := redistest.StartSentinel(t)
	c := calling(t, newTopologyRedis(t, ClientOptions{SentinelMaster: st.Master, SentinelAddrs: st.Addrs()}))
	var backs []time.Duration
	for kill := range 3 {
		old := st.Primary()
		killed := time.Now()
		old.Kill()
		_, recovered := st.Promoted(old, 20*time.Second)
		t.Logf("kill %d: promoted %v after", kill+1, recovered.Sub(killed).Round(time.Millisecond))
		back, ok := c.firstOKAfter(recovered, 10*time.Second)
		if !ok {
			t.Fatalf("kill %d: no call succeeded within 10s of the promotion", kill+1)
		}
		backs = append(backs, back)
		restarted := time.Now()
		st.Rejoin(old, 30*time.Second)
		t.Logf("rejoined %v after the restart", time.Since(restarted))
	}
	t.Logf("calls back %v after each promotion (median %v)", backs, median(backs))
	if m := median(backs); m > 2*time.Second {
		t.Errorf("calls back a median %v after the promotion, want within 2s", m)
	}
}

// TestSentinelClientFollowsTheNewestEpoch: after a failover, two of the
// five Sentinels the client is given still name the dead primary (they
// were cut off from the others: stale Sentinels started on its address)
// and the three that ran the failover name the promoted replica at a
// higher configuration epoch. The client dials the newest: its calls
// succeed, whichever Sentinel answers first.
func TestSentinelClientFollowsTheNewestEpoch(t *testing.T) {
	st := redistest.StartSentinel(t)
	old := st.Primary()
	old.Kill()
	promoted, _ := st.Promoted(old, 20*time.Second)
	stale := []string{st.StaleSentinel(old.Addr).Addr, st.StaleSentinel(old.Addr).Addr}
	for _, order := range [][]string{append(slices.Clone(stale), st.Addrs()...), append(st.Addrs(), stale...)} {
		s := &sentinels{master: st.Master, addrs: order, timeout: time.Second}
		addr, err := s.primary(t.Context())
		if err != nil || addr != promoted.Addr {
			t.Fatalf("Sentinels %v: primary %q (%v), want the promoted %s", order, addr, err, promoted.Addr)
		}
	}
	r := newTopologyRedis(t, ClientOptions{SentinelMaster: st.Master, SentinelAddrs: append(stale, st.Addrs()...)})
	if err := r.Do(t.Context(), func(ctx context.Context, c redis.UniversalClient) error { return c.Incr(ctx, r.Key("probe")).Err() }); err != nil {
		t.Fatalf("a call through stale and fresh Sentinels: %v", err)
	}
}
