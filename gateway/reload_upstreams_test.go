package gateway

import (
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
)

// TestUpstreamsReloadIsRestartOnly: upstreams, routes and degrade (and,
// with upstreams and no degrade.ladder, spend.ladder) need a restart.
func TestUpstreamsReloadIsRestartOnly(t *testing.T) {
	spend := "spend: {prices: {gpt-4o: {input_per_mtok: 2.5, output_per_mtok: 10}, gpt-4o-mini: {input_per_mtok: 0.15, output_per_mtok: 0.6}, claude: {input_per_mtok: 0.1, output_per_mtok: 0.5}}, ceiling_per_hour: %s}\n"
	parse := func(yaml string) *config.Config {
		t.Helper()
		c, err := config.Parse([]byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		c = c.WithDefaults()
		return &c
	}
	data, err := os.ReadFile("../config/testdata/two-deployments.yaml") // a valid config with two deployments
	if err != nil {
		t.Fatal(err)
	}
	// twoDeployments is that config with extra appended, and each pair of
	// repl replaced.
	twoDeployments := func(extra string, repl ...string) string {
		y := string(data) + extra
		for i := 0; i+1 < len(repl); i += 2 {
			y = strings.Replace(y, repl[i], repl[i+1], 1)
		}
		return y
	}
	old := parse(twoDeployments(strings.Replace(spend, "%s", "10", 1)))
	for _, tc := range []struct{ yaml, want string }{
		{twoDeployments(strings.Replace(spend, "%s", "20", 1)), ""},
		{twoDeployments(strings.Replace(spend, "%s", "10", 1) + "admission: {max_queue: 9}\n"), ""},
		{twoDeployments(strings.Replace(spend, "%s", "10", 1), "rpm: 500", "rpm: 600"), "upstreams[0].models[0].rpm"},
		{twoDeployments(strings.Replace(spend, "%s", "10", 1), "url: http://127.0.0.1:9001", "url: http://127.0.0.1:9002"), "upstreams[0].url"},
		{twoDeployments(strings.Replace(spend, "%s", "10", 1) + "routes: {gpt-4o: [west]}\n"), "routes.gpt-4o"},
		{twoDeployments(strings.Replace(spend, "%s", "10", 1) + "degrade: {classes: [batch]}\n"), "degrade.classes"},
		{twoDeployments(strings.Replace(spend, "%s", "10", 1) + "degrade: {ladder: {gpt-4o: gpt-4o-mini}}\n"), "degrade.ladder.gpt-4o"},
		{twoDeployments(strings.Replace(strings.Replace(spend, "%s", "10", 1), "}}, ceiling", "}}, ladder: {gpt-4o: gpt-4o-mini}, ceiling", 1)), "spend.ladder"},
	} {
		if got := restartField(old, parse(tc.yaml)); got != tc.want {
			t.Errorf("config:\n%s→ restart field %q, want %q", tc.yaml, got, tc.want)
		}
	}
}
