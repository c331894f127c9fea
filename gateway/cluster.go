package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/gateway/cluster"
)

// clusterPools is the gateway's pools as the lease sees them (package
// cluster): the first pool's gate and adaptive limit, and every pool's
// share when there are several.
type clusterPools struct{ g *Gateway }

var _ cluster.Pools = clusterPools{}

func (p clusterPools) Len() int                   { return len(p.g.pools) }
func (p clusterPools) Level(now time.Time) int    { return p.g.pools[0].limit.level(now) }
func (p clusterPools) Stats() admission.Stats     { return p.g.pools[0].info.Gate.Stats() }
func (p clusterPools) SetConcurrency(n int)       { _ = p.g.chain.SetPoolConcurrency(0, n) }
func (p clusterPools) Share(now time.Time, n int) { p.g.sharePools(now, n) }

// level is the adaptive limit's concurrency at now: the cluster's number as
// this replica sees it.
func (a *aimd) level(now time.Time) int {
	if a.off {
		return a.ceiling
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.levelLocked(now)
}

// RunStore keeps the books and the lease: with Redis it syncs the books
// and renews the lease of the cluster's concurrency until ctx ends, then
// writes what is queued, releases the lease and closes the connection;
// with Redis keeping only the batches it holds the connection open until
// then; with a snapshot it writes the file every interval and once more at the
// end. Server.Serve runs it, stopping it after the in-flight requests have
// settled; a program that mounts the Gateway itself must too (with Redis
// its gate has one slot until the first lease). Without a store it returns
// at once. Call it once.
func (g *Gateway) RunStore(ctx context.Context) error { return g.books.Run(ctx) }

// runBackground runs the alerts and the store until ctx ends.
func (g *Gateway) runBackground(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { _ = g.RunAlerts(ctx) })
	wg.Go(func() { _ = g.RunStore(ctx) })
	wg.Go(func() { g.cpu.run(ctx, g) })
	wg.Wait()
}
