package fleet

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/loadgen"
	"github.com/sluicehq/sluice/store/redistest"
)

// The child process of TestKilledReplicaGivesItsSlotsBack: the test binary
// run again with FLEET_REPLICA=upstream,slots,redis,cluster serves one
// replica and prints its URLs, until it is killed.
func TestMain(m *testing.M) {
	if spec := os.Getenv("FLEET_REPLICA"); spec != "" {
		os.Exit(child(spec))
	}
	os.Exit(m.Run())
}

func child(spec string) int {
	f := strings.Split(spec, ",")
	slots, _ := strconv.Atoi(f[1])
	r, err := StartReplica(ReplicaConfig(f[0], slots, f[2], f[3]), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("%s %s\n", r.URL, r.Admin)
	select {}
}

const slots = 16

// storm is the tests' storm: 5× a capacity of 16 slots of median (300ms,
// 1s under the race detector) for 5s.
func storm(redisURL, cluster string) Options {
	return Options{Replicas: 3, Slots: slots, Median: median, Load: 5, Duration: 5 * time.Second,
		RedisURL: redisURL, Cluster: cluster}
}

func clusterName(t *testing.T) string {
	return strings.ReplaceAll(t.Name(), "/", "-") + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

// TestStormThroughThreeReplicas: three replicas behind a round-robin
// balancer, a retry storm at 5× the provider's 16 slots. Sharing the
// concurrency on Redis, the provider never has more than 17 calls at once
// (16 and the bound's one floor slot, and the calls whose callers left,
// which run on at the provider), its slots stay busy (≥ 95%), ≤ 1% of
// the billed calls are wasted (5% under the race detector) and no 5xx
// comes without a reason.
// Without the store each replica sends its own 16: the control shows the
// overload (≥ 40 at once) the leases prevent.
func TestStormThroughThreeReplicas(t *testing.T) {
	srv := redistest.Start(t)
	shared, err := Run(t.Context(), storm(srv.URL(), clusterName(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Log(shared)
	alone, err := Run(t.Context(), storm("", ""))
	if err != nil {
		t.Fatal(err)
	}
	t.Log(alone)
	// A call whose caller left goes on at the provider (the mock, like a
	// real provider, generates to the end), but the gateway gives its slot
	// back at once: each such call may add one to the provider's count,
	// with or without leases. Without -race callers hardly ever leave.
	if shared.Peak > slots+1+int(shared.Wasted) {
		t.Errorf("with leases the provider had %d calls at once, want ≤ %d (+%d abandoned calls still running)", shared.Peak, slots+1, shared.Wasted)
	}
	if shared.Busy < 0.95 {
		t.Errorf("with leases the provider's slots were busy %.1f%% of the time, want ≥ 95%%", 100*shared.Busy)
	}
	if shared.Billed == 0 || float64(shared.Wasted) > maxWaste*float64(shared.Billed) {
		t.Errorf("with leases %d of %d billed calls were wasted, want ≤ %.0f%%", shared.Wasted, shared.Billed, 100*maxWaste)
	}
	if shared.Errors5xx != 0 {
		t.Errorf("with leases %d answers were 5xx without a reason: %v", shared.Errors5xx, shared.Report.Rejections)
	}
	if alone.Peak < 40 {
		t.Errorf("without the store the provider had at most %d calls at once, want the overload (≥ 40 of 48)", alone.Peak)
	}
}

// TestSpeculativeFloodOnOneInteractiveOnAnother: a speculative flood sent
// only to replica A, interactive traffic at 80% of capacity only to
// replica B — more than an even split of the slots (16 ÷ 3) or a max-min
// one between A and B (8) would give it. The lease table serves ranks
// first across replicas: B's interactive callers are answered on time
// (≥ 99%), and the provider still has at most 17 calls.
func TestSpeculativeFloodOnOneInteractiveOnAnother(t *testing.T) {
	srv := redistest.Start(t)
	o := storm(srv.URL(), clusterName(t))
	f, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := f.WaitShared(ctx, slots); err != nil {
		t.Fatal(err)
	}
	capacity := o.Capacity()
	f.Provider.Reset()
	var wg sync.WaitGroup
	var flood, inter *loadgen.Report
	var ferr, ierr error
	wg.Go(func() {
		flood, ferr = loadgen.Run(t.Context(), loadgen.Config{Target: f.Replicas[0].URL, Rate: 3 * capacity, Duration: 6 * time.Second, Seed: 1,
			Classes: []loadgen.Class{{Name: "speculative", Weight: 1, Deadline: 5 * time.Second}}, Policy: loadgen.Naive{}})
	})
	wg.Go(func() {
		// B's callers arrive once A's flood holds the cluster.
		time.Sleep(time.Second)
		inter, ierr = loadgen.Run(t.Context(), loadgen.Config{Target: f.Replicas[1].URL, Rate: 0.8 * capacity, Duration: 4 * time.Second, Seed: 2,
			Classes: []loadgen.Class{{Name: "interactive", Weight: 1, Deadline: 5 * time.Second}}, Policy: loadgen.Polite{}})
	})
	wg.Wait()
	if ferr != nil || ierr != nil {
		t.Fatal(ferr, ierr)
	}
	t.Logf("speculative flood on A: %d requests, %.1f%% on time; interactive on B: %d requests, %.2f%% on time, p99 %.0fms; provider peak %d",
		flood.Requests, 100*flood.SuccessRatio, inter.Requests, 100*inter.SuccessRatio, inter.Latency.P99Ms, f.Provider.Peak())
	if inter.SuccessRatio < 0.99 {
		t.Errorf("interactive on B: %.2f%% on time, want ≥ 99%% (failures %v)", 100*inter.SuccessRatio, inter.Failures)
	}
	if p := f.Provider.Peak(); p > slots+1 {
		t.Errorf("the provider had %d calls at once, want ≤ %d", p, slots+1)
	}
}

// TestKilledReplicaGivesItsSlotsBack: a replica in a child process is
// killed with SIGKILL (no release of its lease). Within the lease TTL (3s)
// and a renewal, the two others hold all 16 slots, and use them: the
// provider is back at 16 calls at once.
func TestKilledReplicaGivesItsSlotsBack(t *testing.T) {
	srv := redistest.Start(t)
	cluster := clusterName(t)
	p, err := StartProvider(storm("", "").mock())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var live []*Replica
	for range 2 {
		r, err := StartReplica(ReplicaConfig(p.URL, slots, srv.URL(), cluster), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Stop()
		live = append(live, r)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FLEET_REPLICA="+strings.Join([]string{p.URL, strconv.Itoa(slots), srv.URL(), cluster}, ","))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the child replica: %v", err)
	}
	urls := strings.Fields(line)
	victim := &Replica{URL: urls[0], Admin: urls[1]}
	f := &Fleet{Provider: p, Replicas: append(live, victim)}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := f.WaitShared(ctx, slots); err != nil {
		t.Fatal(err)
	}
	b, err := StartBalancer([]string{live[0].URL, live[1].URL, victim.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	o := storm("", "")
	capacity := o.Capacity()
	done := make(chan *loadgen.Report, 1)
	go func() {
		rep, _ := Storm(t.Context(), b.URL, 3*capacity, 8*time.Second, 3)
		done <- rep
	}()
	time.Sleep(2 * time.Second) // the storm under way on three replicas
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	b.Down(2)
	var back time.Duration
	for {
		// The gates themselves, read a microsecond apart: two state dumps
		// read over HTTP, far apart under load, could count slots moving
		// from one replica to the other twice.
		sum := 0
		for _, r := range live {
			sum += r.G.Gate().Stats().Concurrency
		}
		if sum == slots {
			back = time.Since(killed)
			break
		}
		if time.Since(killed) > 10*time.Second {
			t.Fatalf("10s after the kill the two replicas hold %d slots, want %d", sum, slots)
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.Reset()
	time.Sleep(time.Second) // the storm goes on: the slots in use
	peak := p.Peak()
	rep := <-done
	t.Logf("killed replica: its slots back with the others %v after the kill; provider peak over the next second %d; storm: %d requests, %.1f%% on time",
		back.Round(time.Millisecond), peak, rep.Requests, 100*rep.SuccessRatio)
	if back > 3*time.Second+500*time.Millisecond {
		t.Errorf("the killed replica's slots came back %v after the kill, want within the 3s TTL and a renewal", back)
	}
	if peak < slots-1 || peak > slots+1 {
		t.Errorf("after the slots came back the provider peaked at %d calls at once, want %d±1", peak, slots)
	}
}

// TestRedisStoppedMidStorm: Redis is stopped for 4s (longer than the
// lease TTL) in the middle of a storm through three replicas, then
// restarted. No answer is a 5xx without a sluice reason; the provider
// never has more than 17 calls at once (16 and the bound's one floor
// slot: on Redis's loss each replica keeps the smaller of its lease and
// its local share of ⌊16/3⌋ = 5 until the lease expires, then the share);
// and every replica is back on a shared lease within 2s of the restart.
func TestRedisStoppedMidStorm(t *testing.T) {
	srv := redistest.Start(t)
	o := storm(srv.URL(), clusterName(t))
	o.Duration = 10 * time.Second
	f, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := f.WaitShared(ctx, slots); err != nil {
		t.Fatal(err)
	}
	f.Provider.Reset()
	before := f.Provider.Mock.Stats()
	capacity := o.Capacity()
	done := make(chan *loadgen.Report, 1)
	go func() {
		rep, _ := Storm(t.Context(), f.Balancer.URL, 5*capacity, o.Duration, 5)
		done <- rep
	}()
	time.Sleep(2 * time.Second)
	srv.Stop()
	var modes []string
	for start := time.Now(); time.Since(start) < 4*time.Second; time.Sleep(50 * time.Millisecond) {
		for _, r := range f.Replicas {
			if c, err := ClusterState(r.Admin); err == nil && c != nil {
				if len(modes) == 0 || modes[len(modes)-1] != c.Mode {
					modes = append(modes, c.Mode)
				}
			}
		}
	}
	srv.Restart()
	restarted := time.Now()
	var back time.Duration
	for {
		all := true
		for _, r := range f.Replicas {
			if c, err := ClusterState(r.Admin); err != nil || c == nil || c.Mode != "shared" {
				all = false
			}
		}
		if all {
			back = time.Since(restarted)
			break
		}
		if time.Since(restarted) > 10*time.Second {
			t.Fatal("10s after Redis restarted, not every replica is on a shared lease")
		}
		time.Sleep(10 * time.Millisecond)
	}
	rep := <-done
	t.Logf("Redis stopped for 4s: modes seen %v; back on shared leases %v after the restart; provider peak %d; storm: %d requests, %.1f%% on time, unexplained 5xx %d",
		modes, back.Round(time.Millisecond), f.Provider.Peak(), rep.Requests, 100*rep.SuccessRatio, Unexplained5xx(rep))
	if !strings.Contains(strings.Join(modes, " "), "local") {
		t.Errorf("the replicas never went to their local share: %v", modes)
	}
	if back > 2*time.Second {
		t.Errorf("back on shared leases %v after Redis restarted, want within 2s", back)
	}
	// As in TestStormThroughThreeReplicas: calls whose caller left run on
	// at the provider without a slot.
	after := f.Provider.Mock.Stats()
	abandoned := int((after.Wasted - before.Wasted) + (after.Aborted - before.Aborted))
	if p := f.Provider.Peak(); p > slots+1+abandoned {
		t.Errorf("the provider had %d calls at once, want ≤ %d (+%d abandoned calls still running)", p, slots+1, abandoned)
	}
	if n := Unexplained5xx(rep); n != 0 {
		t.Errorf("%d answers were 5xx without a sluice reason: %v", n, rep.Rejections)
	}
}

// TestFleetFigures prints the figures of docs/perf.md ("several
// replicas, one provider"): the storm with leases on Redis and without a
// store, at 5× capacity for 10s. It runs only with SLUICE_FLEET_FIGURES=1
// (and without -race):
//
//	go test -run TestFleetFigures -v ./cmd/sluice/internal/fleet
func TestFleetFigures(t *testing.T) {
	if os.Getenv("SLUICE_FLEET_FIGURES") != "1" {
		t.Skip("set SLUICE_FLEET_FIGURES=1 to print the figures")
	}
	srv := redistest.Start(t)
	for _, shared := range []bool{true, false} {
		o := storm("", "")
		o.Duration = 10 * time.Second
		if shared {
			o.RedisURL, o.Cluster = srv.URL(), clusterName(t)
		}
		fig, err := Run(t.Context(), o)
		if err != nil {
			t.Fatal(err)
		}
		t.Log(fig)
	}
}
