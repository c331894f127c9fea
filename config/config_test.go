package config

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/chain"
)

func TestConfigErrorsNameTheField(t *testing.T) {
	key := chain.HashKey("k")
	for _, tc := range []struct {
		yaml  string
		field string
	}{
		{"upstream: {url: http://x}\nadmission: {concurrency: 1}\nbogus: 1\n", "bogus"},
		{"upstream: {url: http://x, colour: red}\nadmission: {concurrency: 1}\n", "colour"},
		{"admission: {concurrency: 1}\n", "upstream.url"},
		{"upstream: {url: 'ftp://x'}\nadmission: {concurrency: 1}\n", "upstream.url"},
		{"upstream: {url: http://x}\nadmission: {learn: {min: 5, max: 4}}\n", "admission.learn.min"},
		{"upstream: {url: http://x}\nadmission: {learn: {initial: -1}}\n", "admission.learn.initial"},
		{"upstream: {url: http://x}\nadmission: {concurrency: 8, learn: {max: 9}}\n", "admission.learn.max"},
		{"upstream: {url: http://x}\nadmission: {concurrency: 8, learn: {initial: 9}}\n", "admission.learn.initial"},
		{"upstream: {url: http://x}\nstore: {redis: {url: \"redis://127.0.0.1:1\"}}\n", "admission.concurrency"},
		{"upstream: {url: http://x}\nadmission: {concurrency: two}\n", "concurrency"},
		{"upstream: {url: http://x}\nadmission: {concurrency: 1, max_queue: -1}\n", "admission.max_queue"},
		{"upstream: {url: http://x}\nadmission: {concurrency: 1, wait_estimator: p99}\n", "admission.wait_estimator"},
		{"upstream: {url: http://x}\nadmission: {concurrency: 1, initial_service_time: 5}\n", "initial_service_time"},
		{"upstream: {url: http://x}\nadmission: {concurrency: 1}\nlisten: nope\n", "listen"},
		{"upstream: {url: http://x}\nadmission: {concurrency: 1}\nclasses: {vip: {default_timeout: 1s}}\n", "classes.vip.rank"},
		{"upstream: {url: http://x}\nadmission: {concurrency: 1}\nclasses: {vip: {rank: 99}}\ndefault_class: vip\n", "classes.vip.rank"},
		{"upstream: {url: http://x}\nadmission: {concurrency: 1}\ndefault_class: vip\n", "default_class"},
		{"upstream: {url: http://x}\nadmission: {concurrency: 1}\nranks: {retry: -1}\n", "ranks.retry"},
		{"upstream: {url: http://x}\nadmission: {concurrency: 1}\nlimits: {max_timeout: 1m}\nclasses: {batch: {default_timeout: 5m}}\ndefault_class: batch\n", "classes.batch.default_timeout"},
		{"upstream: {url: http://x}\nadmission: {concurrency: 1}\ntenants: [{name: a, api_keys_sha256: [" + key + "]}]\n", "upstream.api_key_env"},
		{"upstream: {url: http://x, api_key_env: K}\nadmission: {concurrency: 1}\ntenants: [{name: a, tier: gold, api_keys_sha256: [" + key + "]}]\n", "tenants[0].tier"},
		{"upstream: {url: http://x, api_key_env: K}\nadmission: {concurrency: 1}\ntenants: [{name: a, api_keys_sha256: [abc]}]\n", "tenants[0].api_keys_sha256[0]"},
		{"upstream: {url: http://x, api_key_env: K}\nadmission: {concurrency: 1}\ntenants: [{name: a}]\n", "tenants[0].api_keys_sha256"},
		{"upstream: {url: http://x, api_key_env: K}\nadmission: {concurrency: 1}\ntenants: [{name: a, api_keys_sha256: [" + key + "]}, {name: a, api_keys_sha256: [" + chain.HashKey("j") + "]}]\n", "tenants[1].name"},
		{"upstream: {url: http://x, api_key_env: K}\nadmission: {concurrency: 1}\ntenants: [{name: a, api_keys_sha256: [" + key + "]}, {name: b, api_keys_sha256: [" + key + "]}]\n", "tenants[1].api_keys_sha256[0]"},
		{"upstream: {url: http://x, auth_header: cookie}\nadmission: {concurrency: 1}\n", "upstream.auth_header"},
		{"upstream: {url: http://x, api_key_env: K}\nadmission: {concurrency: 1}\ntenants: [{name: a, weight: -1, api_keys_sha256: [" + key + "]}]\n", "tenants[0].weight"},
		{"upstream: {url: http://x, api_key_env: K}\nadmission: {concurrency: 1}\ntenants: [{name: a, weight: 1e9, api_keys_sha256: [" + key + "]}]\n", "tenants[0].weight"},
		{"upstream: {url: http://x, api_key_env: K}\nadmission: {concurrency: 1}\ntenants: [{name: a, max_concurrency: -1, api_keys_sha256: [" + key + "]}]\n", "tenants[0].max_concurrency"},
		{"upstream: {url: http://x, api_key_env: K}\nadmission: {concurrency: 1}\ntenants: [{name: a, queue_share: 1.5, api_keys_sha256: [" + key + "]}]\n", "tenants[0].queue_share"},
	} {
		_, err := Parse([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("config:\n%s→ %v, want an error naming %s", tc.yaml, err, tc.field)
		}
	}
}

// TestTenantSharesReachTheGate: a tenant's weight, max_concurrency and
// queue_share (a fraction of max_queue) are its share of the chain's
// gates; a tenant without them has none.
func TestTenantSharesReachTheGate(t *testing.T) {
	cfg, err := Parse([]byte("upstream: {url: http://x, api_key_env: K}\nadmission: {concurrency: 4, max_queue: 100}\n" +
		"tenants: [{name: a, weight: 2.5, max_concurrency: 3, queue_share: 0.25, api_keys_sha256: [" + chain.HashKey("k") + "]}," +
		" {name: b, api_keys_sha256: [" + chain.HashKey("j") + "]}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cfg.WithDefaults().Chain(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(cc.Tenants) != 2 || cc.Tenants[0].Share != (admission.TenantShare{Weight: 2.5, MaxInFlight: 3, QueueShare: 0.25}) || !cc.Tenants[1].Share.IsZero() {
		t.Fatalf("chain tenants %+v, want a: weight 2.5, 3 in flight, a quarter of the queue; b left at the defaults", cc.Tenants)
	}
	if cc.Admission.Tenants != nil {
		t.Fatalf("the gate's tenants are the chain's to set, not the config's: %+v", cc.Admission.Tenants)
	}
}

func TestConfigExampleIsValid(t *testing.T) {
	cfg, err := Load("../examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Admission.Concurrency == 0 || len(cfg.Tenants) == 0 {
		t.Fatalf("example config: %+v", cfg)
	}
}

// TestConfigNumbersHaveLimits: every size, time and count in the config
// is refused above its maximum (and below its minimum) with an error that
// names the field and the range, and accepted at both ends of the range.
func TestConfigNumbersHaveLimits(t *testing.T) {
	base := "upstream: {url: http://x}\nadmission: {concurrency: 1}\n"
	for _, tc := range []struct {
		field     string // the YAML path
		yaml      string // a document setting it to %s
		lo, hi    string // the ends of the range, accepted
		over      string // refused, and so is below (when not "")
		below     string
		inMessage string // the range as the error writes it
	}{
		{"upstream.max_idle_conns", "upstream: {url: http://x, max_idle_conns: %s}\nadmission: {concurrency: 1}\n", "0", "65536", "65537", "-1", "0..65536"},
		{"admission.concurrency", "upstream: {url: http://x}\nadmission: {concurrency: %s}\n", "0", "100000", "100001", "-1", "0..100000"},
		{"admission.max_queue", "upstream: {url: http://x}\nadmission: {concurrency: 1, max_queue: %s}\n", "0", "1000000", "1000001", "-1", "0..1000000"},
		{"admission.max_queue_per_tenant", "upstream: {url: http://x}\nadmission: {concurrency: 1, max_queue_per_tenant: %s}\n", "0", "1000000", "1000001", "-1", "0..1000000"},
		{"admission.service_window", "upstream: {url: http://x}\nadmission: {concurrency: 1, service_window: %s}\n", "0", "65536", "65537", "-1", "0..65536"},
		{"admission.initial_service_time", "upstream: {url: http://x}\nadmission: {concurrency: 1, initial_service_time: %s}\n", "0s", "1h", "1h0m1s", "-1s", "0s..1h0m0s"},
		{"admission.refusal_spread", "upstream: {url: http://x}\nadmission: {concurrency: 1, refusal_spread: %s}\n", "0s", "1m", "61s", "-1s", "0s..1m0s"},
		{"limits.max_body_bytes", base + "limits: {max_body_bytes: %s}\n", "0", "1073741824", "9223372036854775807", "-1", "0..1073741824"},
		{"limits.max_timeout", base + "limits: {max_timeout: %s}\n", "0s", "24h", "25h", "-1s", "0s..24h0m0s"},
		{"limits.max_call_duration", base + "limits: {max_call_duration: %s}\n", "0s", "24h", "25h", "-1s", "0s..24h0m0s"},
		{"shutdown_grace", base + "shutdown_grace: %s\n", "0s", "1h", "2h", "-1s", "0s..1h0m0s"},
		{"retries.upstream_attempts", base + "retries: {upstream_attempts: %s}\n", "0", "10", "11", "-1", "0..10"},
		{"retries.upstream_backoff", base + "retries: {upstream_backoff: %s}\n", "0s", "1m", "61s", "-1s", "0s..1m0s"},
		{"retries.budget.ratio", base + "retries: {budget: {ratio: %s}}\n", "0", "1", "1.5", "-0.5", "0..1"},
		{"retries.budget.min_per_second", base + "retries: {budget: {min_per_second: %s}}\n", "0", "1e6", "1e7", "-1", "0..1e+06"},
		{"retries.budget.max_tokens", base + "retries: {budget: {max_tokens: %s}}\n", "0", "1e7", "1e8", "-1", "0..1e+07"},
		{"retries.per_tenant.ratio", base + "retries: {per_tenant: {ratio: %s}}\n", "0", "1", "2", "-0.5", "0..1"},
		{"retries.per_tenant.min_per_second", base + "retries: {per_tenant: {min_per_second: %s}}\n", "0", "1e6", "1e7", "-1", "0..1e+06"},
		{"retries.per_tenant.max_tokens", base + "retries: {per_tenant: {max_tokens: %s}}\n", "0", "1e7", "1e8", "-1", "0..1e+07"},
		{"upstream_limit.decrease_factor", base + "upstream_limit: {decrease_factor: %s}\n", "0", "0.99", "1", "-0.1", "0 ≤ f < 1"},
		{"upstream_limit.interval", base + "upstream_limit: {interval: %s}\n", "0s", "1h", "61m", "-1s", "0s..1h0m0s"},
		{"classes.batch.rank", base + "classes: {batch: {rank: %s}}\ndefault_class: batch\n", "0", "14", "16", "-1", "0..15"},
		{"classes.batch.default_timeout", base + "classes: {batch: {default_timeout: %s}}\ndefault_class: batch\n", "0s", "10m", "11m", "-1s", "limits.max_timeout"},
		{"ranks.retry", base + "ranks: {retry: %s}\n", "0", "15", "16", "-1", "0..15"},
		{"ranks.low_tier", base + "ranks: {low_tier: %s}\n", "0", "15", "16", "-1", "0..15"},
		{"ranks.high_tier_boost", base + "ranks: {high_tier_boost: %s}\n", "0", "11", "16", "-1", "0..15"},
	} {
		t.Run(tc.field, func(t *testing.T) {
			if strings.HasPrefix(tc.field, "retries.budget.") || strings.HasPrefix(tc.field, "retries.per_tenant.") || tc.field == "upstream_limit.decrease_factor" {
				// A number that is not one is refused as such, whatever
				// the range.
				for _, v := range []string{".nan", ".inf", "-.inf"} {
					_, err := Parse([]byte(strings.Replace(tc.yaml, "%s", v, 1)))
					if err == nil || !strings.Contains(err.Error(), tc.field+":") || !strings.Contains(err.Error(), "is not a number") {
						t.Errorf("%s: %s → %v, want an error naming the field", tc.field, v, err)
					}
				}
			}
			for _, v := range []string{tc.lo, tc.hi} {
				if _, err := Parse([]byte(strings.Replace(tc.yaml, "%s", v, 1))); err != nil {
					t.Errorf("%s: %s refused: %v", tc.field, v, err)
				}
			}
			for _, v := range []string{tc.over, tc.below} {
				_, err := Parse([]byte(strings.Replace(tc.yaml, "%s", v, 1)))
				if err == nil || !strings.Contains(err.Error(), tc.field+":") || !strings.Contains(err.Error(), tc.inMessage) {
					t.Errorf("%s: %s → %v, want an error naming the field and %q", tc.field, v, err, tc.inMessage)
				}
			}
		})
	}
}
