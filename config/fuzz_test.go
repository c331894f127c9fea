package config

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/chain"
)

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("upstream: {url: http://x}\nadmission: {concurrency: 1}\n"))
	f.Add([]byte("upstream: {url: http://x}\nadmission: {concurrency: 4, max_queue: 16}\nlimits: {max_body_bytes: 9223372036854775807}\n"))
	f.Add([]byte("upstream: {url: http://x}\nadmission: {concurrency: 1}\nupstream_limit: {decrease_factor: .nan, interval: 1h}\n"))
	f.Add([]byte("upstream: {url: http://x}\nadmission: {concurrency: 1}\nretries: {budget: {ratio: .inf}}\nshutdown_grace: 2h\n"))
	f.Add([]byte("upstream: {url: http://x}\nadmission: {concurrency: 1}\nclasses: {vip: {rank: 5, default_timeout: 1s}}\ndefault_class: vip\n"))
	f.Add([]byte("upstream: {url: http://x, api_key_env: K}\nadmission: {concurrency: 1}\ntenants: [{name: a, api_keys_sha256: [" + chain.HashKey("k") + "]}]\n"))
	f.Add([]byte("a: &a [*a, *a]\n"))
	f.Add([]byte("upstream: {url: http://x}\n")) // concurrency learnt
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64<<10 {
			return // a config file is small; the YAML parser's cost is not the subject
		}
		cfg, err := Parse(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "config: ") {
				t.Fatalf("error %q does not start with config:", err)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("ParseConfig accepted what Validate refuses: %v", err)
		}
		d := cfg.WithDefaults()
		// Concurrency 0 is learnt (issue 23): the gate starts at the
		// learning's initial limit and never runs above its ceiling.
		ac, err := d.admissionConfig()
		if err != nil {
			t.Fatalf("accepted a config whose gate cannot be built: %v", err)
		}
		if ceiling := d.ceilingFor(d.Admission.Concurrency); d.Limits.MaxBodyBytes <= 0 || d.Limits.MaxBodyBytes > maxBodyBytes || d.Limits.MaxTimeout.D() <= 0 || d.Limits.MaxTimeout.D() > maxTimeout ||
			d.Admission.Concurrency < 0 || ac.Concurrency < 1 || ac.Concurrency > ceiling || ceiling > maxConcurrency || d.ShutdownGrace.D() > maxShutdownGrace ||
			!(d.UpstreamLimit.DecreaseFactor >= 0 && d.UpstreamLimit.DecreaseFactor < 1) {
			t.Fatalf("accepted out of range: %+v", d)
		}
	})
}
