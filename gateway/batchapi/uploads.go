package batchapi

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/contract"
)

// uploads bounds the uploads being read at once, all tenants together
// (batch.max_uploads) and per tenant (batch.max_tenant_uploads): an upload
// is streamed to the store a chunk at a time, each a write of the store,
// so the bound is what bounds the store's write load, and the per-tenant
// one keeps one tenant from taking every turn. Safe for concurrent use.
type uploads struct {
	max, maxTenant int
	mu             struct {
		sync.Mutex
		total    int
		byTenant map[string]int
	}
}

func newUploads(max, maxTenant int) *uploads {
	u := &uploads{max: max, maxTenant: maxTenant}
	u.mu.byTenant = map[string]int{}
	return u
}

// acquire takes a turn for tenant; ok false names the bound that is full
// (its config key and value). release gives the turn back; call it once.
func (u *uploads) acquire(tenant string) (release func(), field string, bound int, ok bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case u.mu.byTenant[tenant] >= u.maxTenant:
		return nil, "batch.max_tenant_uploads", u.maxTenant, false
	case u.mu.total >= u.max:
		return nil, "batch.max_uploads", u.max, false
	}
	u.mu.total++
	u.mu.byTenant[tenant]++
	var once sync.Once
	return func() {
		once.Do(func() {
			u.mu.Lock()
			defer u.mu.Unlock()
			u.mu.total--
			if u.mu.byTenant[tenant]--; u.mu.byTenant[tenant] == 0 {
				delete(u.mu.byTenant, tenant)
			}
		})
	}, "", 0, true
}

// uploadRetry is the Retry-After of an upload refused for a full bound:
// an upload of the default 100 MiB takes seconds to tens of seconds to
// send, so sooner would mostly be refused again.
const uploadRetry = 5 * time.Second

// tooManyUploads refuses an upload past a bound, before a byte of it is
// read: 429 with Retry-After.
func (a *API) tooManyUploads(w http.ResponseWriter, field string, bound int) {
	retryMs := contract.RetryAfterMs(uploadRetry)
	a.deps.BadInput("too_many_uploads")
	w.Header().Set(contract.HeaderRetryAfter, strconv.FormatInt(contract.RetryAfterSeconds(uploadRetry), 10))
	w.Header().Set(contract.HeaderRetryAfterMs, strconv.FormatInt(retryMs, 10))
	a.deps.WriteError(w, http.StatusTooManyRequests, contract.ErrorBody{Error: contract.ErrorDetail{
		Message: fmt.Sprintf("%d uploads are being read already (%s); retry after %d ms", bound, field, retryMs),
		Type:    contract.ErrorTypeRateLimit, Code: "too_many_uploads", RetryAfterMs: &retryMs}})
}
