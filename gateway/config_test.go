package gateway

import (
	"strings"
	"testing"
)

func TestConfigErrorsNameTheField(t *testing.T) {
	key := HashKey("k")
	for _, tc := range []struct {
		yaml  string
		field string
	}{
		{"upstream: {url: http://x}\nadmission: {concurrency: 1}\nbogus: 1\n", "bogus"},
		{"upstream: {url: http://x, colour: red}\nadmission: {concurrency: 1}\n", "colour"},
		{"admission: {concurrency: 1}\n", "upstream.url"},
		{"upstream: {url: 'ftp://x'}\nadmission: {concurrency: 1}\n", "upstream.url"},
		{"upstream: {url: http://x}\n", "admission.concurrency"},
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
		{"upstream: {url: http://x, api_key_env: K}\nadmission: {concurrency: 1}\ntenants: [{name: a, api_keys_sha256: [" + key + "]}, {name: a, api_keys_sha256: [" + HashKey("j") + "]}]\n", "tenants[1].name"},
		{"upstream: {url: http://x, api_key_env: K}\nadmission: {concurrency: 1}\ntenants: [{name: a, api_keys_sha256: [" + key + "]}, {name: b, api_keys_sha256: [" + key + "]}]\n", "tenants[1].api_keys_sha256[0]"},
		{"upstream: {url: http://x, auth_header: cookie}\nadmission: {concurrency: 1}\n", "upstream.auth_header"},
	} {
		_, err := ParseConfig([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("config:\n%s→ %v, want an error naming %s", tc.yaml, err, tc.field)
		}
	}
}

func TestConfigExampleIsValid(t *testing.T) {
	cfg, err := LoadConfig("../examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Admission.Concurrency == 0 || len(cfg.Tenants) == 0 {
		t.Fatalf("example config: %+v", cfg)
	}
}

func TestMissingProviderKeyIsAnError(t *testing.T) {
	cfg := baseConfig("http://127.0.0.1:1")
	cfg.Upstream.APIKeyEnv = "SLUICE_TEST_UNSET_VARIABLE"
	_, err := New(cfg, Options{Getenv: func(string) string { return "" }})
	if err == nil || !strings.Contains(err.Error(), "SLUICE_TEST_UNSET_VARIABLE") {
		t.Fatalf("err = %v", err)
	}
}
