package config

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/chain"
)

// twoDeployments is a valid config with two deployments
// (testdata/two-deployments.yaml, which the gateway's reload test reads
// too); extra is
// appended (routes, degrade, ...), and repl replaces text in it.
func twoDeployments(extra string, repl ...string) string {
	data, err := os.ReadFile("testdata/two-deployments.yaml")
	if err != nil {
		panic(err)
	}
	y := string(data)
	y += extra
	for i := 0; i+1 < len(repl); i += 2 {
		if !strings.Contains(y, repl[i]) {
			panic("twoDeployments: no " + repl[i])
		}
		y = strings.Replace(y, repl[i], repl[i+1], 1)
	}
	return y
}

// TestUpstreamsErrorsNameTheField: every bad upstreams, routes or degrade
// is refused with an error naming the field by its YAML path.
func TestUpstreamsErrorsNameTheField(t *testing.T) {
	key := chain.HashKey("k")
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"both upstream and upstreams", twoDeployments("upstream: {url: http://x}\n"), "upstreams: set together with upstream.url"},
		{"upstream key with upstreams", twoDeployments("upstream: {api_key_env: K}\n"), "upstream.api_key_env"},
		{"upstream auth header with upstreams", twoDeployments("upstream: {auth_header: x-api-key}\n"), "upstream.auth_header"},
		{"admission.concurrency with upstreams", twoDeployments("admission: {concurrency: 4}\n"), "admission.concurrency: set together with upstreams: set it per upstream"},
		{"no name", twoDeployments("", "name: west", "name: ''"), "upstreams[1].name is required"},
		{"bad name", twoDeployments("", "name: west", "name: 'we st'"), "upstreams[1].name"},
		{"duplicate name", twoDeployments("", "name: west", "name: east"), `upstreams[1].name: "east" is also upstreams[0]'s`},
		{"no url", twoDeployments("", "url: https://west.example.com/v1", "url: ''"), "upstreams[1].url is required"},
		{"bad url", twoDeployments("", "url: https://west.example.com/v1", "url: 'ftp://w'"), "upstreams[1].url"},
		{"bad flavour", twoDeployments("", "flavour: anthropic", "flavour: gemini"), "upstreams[1].flavour"},
		{"negative concurrency", twoDeployments("", "concurrency: 4\n", "concurrency: -4\n"), "upstreams[1].concurrency"},
		{"huge concurrency", twoDeployments("", "concurrency: 16", "concurrency: 100001"), "upstreams[0].concurrency"},
		{"negative model concurrency", twoDeployments("", "concurrency: 8", "concurrency: -8"), "upstreams[0].models[0].concurrency"},
		{"negative rpm", twoDeployments("", "rpm: 500", "rpm: -1"), "upstreams[0].models[0].rpm"},
		{"negative tpm", twoDeployments("", "tpm: 100", "tpm: -100"), "upstreams[1].models[1].tpm"},
		{"no models", twoDeployments("", "    models:\n      - name: gpt-4o\n      - name: claude\n        tpm: 100\n", "    models: []\n"), "upstreams[1].models: at least one"},
		{"model without name", twoDeployments("", "- name: gpt-4o-mini", "- aliases: [m]"), "upstreams[0].models[1].name is required"},
		{"duplicate model", twoDeployments("", "- name: gpt-4o-mini", "- name: gpt-4o"), `upstreams[0].models[1].name: "gpt-4o" is also upstreams[0].models[0].name`},
		{"alias is another model's name", twoDeployments("", "[gpt-4o-2024-08-06]", "[gpt-4o-mini]"), `upstreams[0].models[1].name: "gpt-4o-mini" is also upstreams[0].models[0].aliases[0]`},
		{"alias twice", twoDeployments("", "[gpt-4o-2024-08-06]", "[a, a]"), "upstreams[0].models[0].aliases[1]"},
		{"empty alias", twoDeployments("", "[gpt-4o-2024-08-06]", "['']"), "upstreams[0].models[0].aliases[0]"},
		{"tenants without a key", twoDeployments("tenants: [{name: a, api_keys_sha256: ["+key+"]}]\n", "    api_key_env: WEST_KEY\n", ""), "upstreams[1].api_key_env is required when tenants"},
		{"route to unknown deployment", twoDeployments("routes: {gpt-4o: [east, north]}\n"), `routes.gpt-4o[1]: "north" is not a deployment`},
		{"route to deployment not serving", twoDeployments("routes: {gpt-4o-mini: [east, west]}\n"), `routes.gpt-4o-mini[1]: deployment "west" does not serve model "gpt-4o-mini"`},
		{"alias not served there", twoDeployments("routes: {gpt-4o-2024-08-06: [west]}\n"), `routes.gpt-4o-2024-08-06[0]: deployment "west" does not serve model "gpt-4o-2024-08-06"`},
		{"duplicate in route", twoDeployments("routes: {gpt-4o: [east, west, east]}\n"), `routes.gpt-4o[2]: deployment "east" is listed twice`},
		{"route for unserved model", twoDeployments("routes: {o3: [east]}\n"), `routes.o3: model "o3" is served by no deployment`},
		{"empty route", twoDeployments("routes: {gpt-4o: []}\n"), "routes.gpt-4o: at least one"},
		{"ladder model unserved", twoDeployments("degrade: {ladder: {o3: gpt-4o}}\n"), `degrade.ladder.o3: model "o3" is served by no deployment`},
		{"ladder rung unserved", twoDeployments("degrade: {ladder: {gpt-4o: o3}}\n"), `degrade.ladder.gpt-4o: rung "o3" is served by no deployment`},
		{"ladder cycle", twoDeployments("degrade: {ladder: {gpt-4o: gpt-4o-mini, gpt-4o-mini: claude, claude: gpt-4o}}\n"), `degrade.ladder.gpt-4o-mini: the ladder loops back to "claude"`},
		{"ladder self loop", twoDeployments("degrade: {ladder: {gpt-4o-mini: gpt-4o-mini}}\n"), `degrade.ladder.gpt-4o-mini: the ladder loops back to "gpt-4o-mini"`},
		{"spend ladder as the ladder, unserved", twoDeployments("spend: {prices: {gpt-4o: {input_per_mtok: 2.5, output_per_mtok: 10}, o1: {input_per_mtok: 1, output_per_mtok: 1}}, ladder: {gpt-4o: o1}}\n"), `spend.ladder.gpt-4o: rung "o1" is served by no deployment`},
		{"spend ladder unserved beside degrade.ladder", twoDeployments("degrade: {ladder: {gpt-4o: gpt-4o-mini}}\nspend: {prices: {gpt-4o: {input_per_mtok: 2.5, output_per_mtok: 10}, o1: {input_per_mtok: 1, output_per_mtok: 1}}, ladder: {gpt-4o: o1}}\n"), `spend.ladder.gpt-4o: rung "o1"`},
		{"unknown degrade class", twoDeployments("degrade: {classes: [bulk]}\n"), `degrade.classes[0]: "bulk" is not a class`},
		{"duplicate degrade class", twoDeployments("degrade: {classes: [batch, batch]}\n"), `degrade.classes[1]: "batch" is listed twice`},
		{"routes without upstreams", "upstream: {url: http://x}\nadmission: {concurrency: 1}\nroutes: {gpt-4o: [a]}\n", "routes: needs upstreams"},
		{"ladder without upstreams", "upstream: {url: http://x}\nadmission: {concurrency: 1}\ndegrade: {ladder: {a: b}}\n", "degrade.ladder: needs upstreams"},
		{"degrade classes without upstreams", "upstream: {url: http://x}\nadmission: {concurrency: 1}\ndegrade: {classes: [batch]}\n", "degrade.classes: needs upstreams"},
		{"unknown field", twoDeployments("", "rpm: 500", "rpn: 500"), "rpn"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("config:\n%s→ %v, want an error containing %q", tc.yaml, err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "config: ") {
				t.Errorf("error %q does not start with config:", err)
			}
		})
	}
}

// TestUpstreamsBuildRouting: a valid two-deployment config becomes a pool
// per (deployment, model), routes for every name callers may use (aliases
// included), in upstreams order unless routes orders them, and the ladder
// and classes of degrade.
func TestUpstreamsBuildRouting(t *testing.T) {
	cfg, err := Parse([]byte(twoDeployments("routes: {gpt-4o: [west, east]}\ndegrade: {ladder: {gpt-4o: gpt-4o-mini}, classes: [batch]}\nadmission: {initial_service_time: 60s}\n")))
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.WithDefaults()
	if d.Admission.Concurrency != 16 {
		t.Errorf("base concurrency %d, want the largest pool's, 16", d.Admission.Concurrency)
	}
	base, err := d.admissionConfig()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := d.routingConfig(base)
	if err != nil {
		t.Fatal(err)
	}
	type pool struct {
		name, dep, model, flavour string
		conc, queue               int
		rpm, tpm                  int64
	}
	var got []pool
	for _, p := range rc.Pools {
		got = append(got, pool{p.Name, p.Deployment, p.Model, p.Flavour, p.Admission.Concurrency, p.Admission.MaxQueue, p.RPM, p.TPM})
		if p.Admission.Ranks.Default != base.Ranks.Default || p.Admission.WaitEstimator != base.WaitEstimator {
			t.Errorf("pool %s: admission not based on the gate's: %+v", p.Name, p.Admission)
		}
	}
	q := d.defaultMaxQueueFor
	want := []pool{
		{"east/gpt-4o", "east", "gpt-4o", "openai", 8, q(8), 500, 30000},
		{"east/gpt-4o-mini", "east", "gpt-4o-mini", "openai", 16, q(16), 0, 0},
		{"west/gpt-4o", "west", "gpt-4o", "anthropic", 4, q(4), 0, 0},
		{"west/claude", "west", "claude", "anthropic", 4, q(4), 0, 100},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("pools\n%+v\nwant\n%+v", got, want)
	}
	if q(4) == q(16) {
		t.Errorf("the derived waiting room does not depend on the concurrency: %d", q(4))
	}
	wantRoutes := map[string][]string{
		"gpt-4o":            {"west/gpt-4o", "east/gpt-4o"}, // as routes says
		"gpt-4o-2024-08-06": {"east/gpt-4o"},                // an alias, sent as gpt-4o
		"gpt-4o-mini":       {"east/gpt-4o-mini"},
		"claude":            {"west/claude"},
	}
	if !reflect.DeepEqual(rc.Routes, wantRoutes) {
		t.Errorf("routes %v, want %v", rc.Routes, wantRoutes)
	}
	if !reflect.DeepEqual(rc.Ladder, map[string]string{"gpt-4o": "gpt-4o-mini"}) || !reflect.DeepEqual(rc.DegradeClasses, []string{"batch"}) {
		t.Errorf("ladder %v, classes %v", rc.Ladder, rc.DegradeClasses)
	}

	// Without routes: every deployment serving the model, in upstreams
	// order. An explicit max_queue is every pool's.
	cfg, err = Parse([]byte(twoDeployments("admission: {max_queue: 7}\n")))
	if err != nil {
		t.Fatal(err)
	}
	rc, err = cfg.Routing()
	if err != nil {
		t.Fatal(err)
	}
	if r := rc.Routes["gpt-4o"]; !reflect.DeepEqual(r, []string{"east/gpt-4o", "west/gpt-4o"}) {
		t.Errorf("default route of gpt-4o %v, want east then west", r)
	}
	for _, p := range rc.Pools {
		if p.Admission.MaxQueue != 7 {
			t.Errorf("pool %s: max_queue %d, want the configured 7", p.Name, p.Admission.MaxQueue)
		}
	}
	if rc.Ladder != nil || len(rc.DegradeClasses) != 0 {
		t.Errorf("no degrade section: ladder %v, classes %v", rc.Ladder, rc.DegradeClasses)
	}
}

// TestUpstreamsLadderFromSpend: an empty degrade.ladder is spend.ladder.
func TestUpstreamsLadderFromSpend(t *testing.T) {
	cfg, err := Parse([]byte(twoDeployments("spend: {prices: {gpt-4o: {input_per_mtok: 2.5, output_per_mtok: 10}, gpt-4o-mini: {input_per_mtok: 0.15, output_per_mtok: 0.6}}, ladder: {gpt-4o: gpt-4o-mini}}\n")))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := cfg.Routing()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rc.Ladder, map[string]string{"gpt-4o": "gpt-4o-mini"}) {
		t.Errorf("ladder %v, want spend's", rc.Ladder)
	}
}

// TestUpstreamsSingleUpstreamHasNoRouting: the single upstream is one pool:
// no routing
func TestUpstreamsSingleUpstreamHasNoRouting(t *testing.T) {
	cfg, err := Parse([]byte("upstream: {url: http://127.0.0.1:9, auth_header: x-api-key, api_key_env: K}\nadmission: {concurrency: 3}\n"))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := cfg.Routing()
	if err != nil || rc != nil {
		t.Fatalf("routing %+v, %v; want nil", rc, err)
	}
	// One upstream is one deployment (and the chain's one pool,
	// chain.DefaultPool), reached as upstream says.
	deps, err := cfg.Deployments()
	if err != nil || len(deps) != 1 {
		t.Fatalf("deployments %+v, %v; want the one upstream", deps, err)
	}
	if d := deps[0]; d.Name != chain.DefaultPool || d.URL.String() != "http://127.0.0.1:9" || d.APIKeyEnv != "K" ||
		d.KeyField != "upstream.api_key_env" || d.AuthHeader != "x-api-key" || d.Flavour != FlavourOpenAI {
		t.Fatalf("deployment %+v", d)
	}
}

// TestUpstreamsDeployments: what the runtime needs of each deployment.
func TestUpstreamsDeployments(t *testing.T) {
	cfg, err := Parse([]byte(twoDeployments("")))
	if err != nil {
		t.Fatal(err)
	}
	deps, err := cfg.Deployments()
	if err != nil {
		t.Fatal(err)
	}
	if len(deps) != 2 {
		t.Fatalf("%d deployments", len(deps))
	}
	e, w := deps[0], deps[1]
	if e.Name != "east" || e.URL.String() != "http://127.0.0.1:9001" || e.APIKeyEnv != "EAST_KEY" || e.Flavour != FlavourOpenAI || e.AuthHeader != "authorization" {
		t.Errorf("east: %+v", e)
	}
	if w.Name != "west" || w.URL.Path != "/v1" || w.APIKeyEnv != "WEST_KEY" || w.Flavour != FlavourAnthropic || w.AuthHeader != "x-api-key" {
		t.Errorf("west: %+v", w)
	}
}

// TestUpstreamsWithoutConcurrencyLearn: a deployment without a
// concurrency is valid, and its pools (but those of a model with its own)
// learn theirs from the initial limit, while the other deployment's stay
// fixed.
func TestUpstreamsWithoutConcurrencyLearn(t *testing.T) {
	cfg, err := Parse([]byte(twoDeployments("", "    concurrency: 4\n", "")))
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.WithDefaults()
	learning := d.Learning()
	rc, err := d.Routing()
	if err != nil {
		t.Fatal(err)
	}
	if len(learning) != len(rc.Pools) {
		t.Fatalf("%d learnings for %d pools", len(learning), len(rc.Pools))
	}
	for i, p := range rc.Pools {
		learns := learning[i] != nil
		if want := p.Deployment == "west"; learns != want {
			t.Errorf("pool %s learns: %v, want %v", p.Name, learns, want)
		}
		if learns && (p.Admission.Concurrency != 4 || learning[i].Max != 1000) {
			t.Errorf("pool %s: concurrency %d, learning %+v: want from 4, at most 1000", p.Name, p.Admission.Concurrency, *learning[i])
		}
	}
}
