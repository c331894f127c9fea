package gateway

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
)

// TestTheLearntConcurrencyIsShown: a gateway told no concurrency runs its
// gate at the learner's initial limit and says so in the state dump, the
// metrics and the dashboard's sample; told one, it says nothing of
// learning.
func TestTheLearntConcurrencyIsShown(t *testing.T) {
	g, err := New(config.Config{Upstream: config.UpstreamConfig{URL: "http://127.0.0.1:1"}}, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	st := g.State()
	if st.Concurrency != 4 || len(st.Learned) != 1 || st.Learned[0].Concurrency != 4 || st.Learned[0].Phase != "starting" {
		t.Errorf("state: concurrency %d, learned %+v; want 4, starting", st.Concurrency, st.Learned)
	}
	if !g.dashboardReading(time.Now()).Sample.Learned {
		t.Error("the dashboard's sample does not say the concurrency is learnt")
	}
	if n := gauge(t, g, "sluice_concurrency_learned"); n != 4 {
		t.Errorf("sluice_concurrency_learned %v, want 4", n)
	}

	told, err := New(config.Config{Upstream: config.UpstreamConfig{URL: "http://127.0.0.1:1"}, Admission: config.AdmissionConfig{Concurrency: 8}}, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if st := told.State(); st.Concurrency != 8 || st.Learned != nil {
		t.Errorf("told 8: concurrency %d, learned %+v", st.Concurrency, st.Learned)
	}
	if told.dashboardReading(time.Now()).Sample.Learned {
		t.Error("told 8, the dashboard says the concurrency is learnt")
	}
}

// gauge is the value of the one series of a gauge of g's registry.
func gauge(t *testing.T, g *Gateway, name string) float64 {
	t.Helper()
	mfs, err := g.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s with one series", name)
	return 0
}
