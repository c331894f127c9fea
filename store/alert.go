package store

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/spend"
)

// alertClaimTTL bounds how long a claim suppresses the same transition on
// the other replicas. The opposite transition deletes it, so a scope that
// fires, resolves and fires again is announced each time; the TTL only
// keeps the keys from living forever.
const alertClaimTTL = time.Hour

// claimScript sets the claim of one transition if nobody has, and clears
// the claim of the opposite one, so that the next crossing can be claimed.
var claimScript = redis.NewScript(`
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
redis.call('DEL', KEYS[2])
return 1`)

// AlertClaim returns a function for spend.AlerterOptions.Claim: of the
// replicas that see the same crossing of a scope's alert threshold, the
// first to claim it in Redis delivers the webhook, the others do not.
// While Redis is unreachable every claim succeeds: each replica alerts on
// its own, more than once for the cluster rather than never.
func AlertClaim(r *Redis, replica string) func(ctx context.Context, ev spend.AlertEvent) bool {
	return func(ctx context.Context, ev spend.AlertEvent) bool {
		other := spend.AlertResolved
		if ev.State == spend.AlertResolved {
			other = spend.AlertFired
		}
		keys := []string{r.Key("alert", ev.Scope, ev.Tenant, ev.State), r.Key("alert", ev.Scope, ev.Tenant, other)}
		var won int64
		err := r.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
			var err error
			won, err = claimScript.Run(ctx, c, keys, replica, alertClaimTTL.Milliseconds()).Int64()
			return err
		})
		return err != nil || won == 1
	}
}
