package dashboard

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/spend"
)

// fakeGateway is a Source: gauges and totals the test sets, read by the
// Board's one sampling goroutine (the test's own).
type fakeGateway struct {
	served   uint64
	wasted   float64 // USD since start; with spend set
	spend    bool
	refusals map[Refusal]float64
	would    map[Refusal]float64 // observe mode's
}

func (f *fakeGateway) read(time.Time) Reading {
	d := Sample{Concurrency: 4, Depth: make([]int, 6), WaitMs: make([]int64, 6), Served: f.served, ServiceMs: map[string][2]int64{}}
	if f.spend {
		d.Spend = &Spend{Stage: spend.StageNormal.String(), Tenants: map[string]float64{}, WastedUSD: f.wasted}
	}
	return Reading{Sample: d, Refusals: maps.Clone(f.refusals), WouldRefuse: maps.Clone(f.would)}
}

// testClasses are the default classes' ranks and deadlines.
var testClasses = map[string]Class{
	admission.ClassInteractive: {Rank: 4, DefaultTimeoutMs: 30000},
	admission.ClassBatch:       {Rank: 2, DefaultTimeoutMs: 600000},
	admission.ClassSpeculative: {Rank: 0, DefaultTimeoutMs: 10000},
}

// TestSamplerWindowAndRing: the sampler turns counters into the interval's
// counts, forgets refusals after five minutes, and keeps 900 samples
// oldest first. Time is an input: Sample takes it.
func TestSamplerWindowAndRing(t *testing.T) {
	f := &fakeGateway{refusals: map[Refusal]float64{}}
	s := New(testClasses, nil, f.read)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if d := s.Sample(t0); d.Status.Level != "ok" || d.Concurrency != 4 || len(d.Depth) != 6 || d.Time != t0.UnixMilli() {
		t.Fatalf("first sample: %+v", d)
	}
	f.refusals[Refusal{"queue_full", "interactive"}] += 3
	f.refusals[Refusal{"spend_ceiling", "batch"}]++
	f.served = 10
	d := s.Sample(t0.Add(2 * time.Second))
	if d.RefusedReason["queue_full"] != 3 || d.RefusedReason["spend_ceiling"] != 1 || d.RefusedClass["interactive"] != 3 ||
		d.ShedClass["interactive"] != 3 || d.ShedClass["batch"] != 0 {
		t.Fatalf("the interval's refusals: reason %v class %v shed %v", d.RefusedReason, d.RefusedClass, d.ShedClass)
	}
	if d.Goodput != 5 {
		t.Fatalf("goodput %v, want 10 answers in 2s: 5", d.Goodput)
	}
	if d.Status.Level != "crit" || !strings.HasPrefix(d.Status.Text, "Interactive work is being shed") {
		t.Fatalf("status after interactive refusals: %+v", d.Status)
	}
	// The next interval counts nothing new; the status remembers.
	if d := s.Sample(t0.Add(3 * time.Second)); len(d.RefusedReason) != 0 || d.Goodput != 0 || d.Status.Level != "crit" {
		t.Fatalf("a quiet second after: %v %v %+v", d.RefusedReason, d.Goodput, d.Status)
	}
	if d := s.Sample(t0.Add(3*time.Second + statusWindow)); d.Status.Level != "ok" {
		t.Fatalf("five minutes later: %+v", d.Status)
	}
	h := s.History()
	if len(h.Samples) != 4 || h.Samples[0].Time != t0.UnixMilli() || h.Samples[1].Status.Level != "crit" {
		t.Fatalf("history: %d samples, first at %d, second %+v", len(h.Samples), h.Samples[0].Time, h.Samples[1].Status)
	}
	start := t0.Add(time.Hour)
	for i := range 1000 {
		s.Sample(start.Add(time.Duration(i) * time.Second))
	}
	h = s.History()
	if len(h.Samples) != ringSamples {
		t.Fatalf("the ring holds %d samples, want %d", len(h.Samples), ringSamples)
	}
	if first, last := h.Samples[0].Time, h.Samples[len(h.Samples)-1].Time; first != start.Add(100*time.Second).UnixMilli() ||
		last != start.Add(999*time.Second).UnixMilli() {
		t.Fatalf("the ring spans %d–%d", first, last)
	}
	if h.Meta.Classes[admission.ClassInteractive].DefaultTimeoutMs != 30000 || h.Meta.EverySeconds != 1 || h.Meta.Spend != nil {
		t.Fatalf("meta: %+v", h.Meta)
	}
}

// TestTopClasses: the classes of the highest rank are the work whose
// shedding is critical; a lower one's is a warning.
func TestTopClasses(t *testing.T) {
	f := &fakeGateway{refusals: map[Refusal]float64{}}
	s := New(map[string]Class{"gold": {Rank: 3}, "silver": {Rank: 3}, "bronze": {Rank: 1}}, nil, f.read)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.Sample(t0)
	f.refusals[Refusal{"queue_wait", "bronze"}] = 2
	if d := s.Sample(t0.Add(time.Second)); d.Status.Level != "warn" {
		t.Fatalf("a lower class shed: %+v", d.Status)
	}
	f.refusals[Refusal{"evicted", "silver"}] = 1
	if d := s.Sample(t0.Add(2 * time.Second)); d.Status.Level != "crit" || !strings.HasPrefix(d.Status.Text, "Silver work is being shed") {
		t.Fatalf("a top class shed: %+v", d.Status)
	}
}

// TestSpendMetaAndWaste: the meta places the ceiling's stages in USD per
// hour, SetSpend replaces them, and a sample's waste rate is the
// interval's.
func TestSpendMetaAndWaste(t *testing.T) {
	f := &fakeGateway{spend: true}
	s := New(testClasses, &spend.Config{CeilingPerHour: 10, AlertPerHour: 8}, f.read)
	m := s.History().Meta.Spend
	if m == nil || m.CeilingPerHour != 10 || m.AlertPerHour != 8 ||
		m.ShedAt != 10*spend.DefaultShedSpeculativeAt || m.DegradeAt != 10*spend.DefaultDegradeAt || m.RejectAt != 10*spend.DefaultRejectAt {
		t.Fatalf("spend meta: %+v", m)
	}
	s.SetSpend(&spend.Config{AlertPerHour: 3})
	if m := s.History().Meta.Spend; m == nil || *m != (SpendMeta{AlertPerHour: 3}) {
		t.Fatalf("after SetSpend, without a ceiling: %+v", m)
	}
	s.SetSpend(nil)
	if m := s.History().Meta.Spend; m != nil {
		t.Fatalf("after SetSpend(nil): %+v", m)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.wasted = 1
	s.Sample(t0)
	f.wasted = 1.5
	if d := s.Sample(t0.Add(10 * time.Second)); d.Spend == nil || d.Spend.WastedUSD != 1.5 || d.Spend.WastedPerH != 180 {
		t.Fatalf("waste: %+v", d.Spend)
	}
}

// TestRefusalTotals: the counter's children are summed by reason and
// class, over their other labels; a refusal without a class is "none".
func TestRefusalTotals(t *testing.T) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "refused"}, []string{"reason", "class", "tenant"})
	vec.WithLabelValues("queue_full", "interactive", "a").Add(2)
	vec.WithLabelValues("queue_full", "interactive", "b").Add(3)
	vec.WithLabelValues("draining", "", "").Inc()
	got := RefusalTotals(vec)
	want := map[Refusal]float64{{"queue_full", "interactive"}: 5, {"draining", "none"}: 1}
	if !maps.Equal(got, want) {
		t.Fatalf("totals %v, want %v", got, want)
	}
}

// BenchmarkSample: the Board's own share of a sample (the gateway's
// reading aside, see the gateway's BenchmarkDashboardSample): the
// interval's counts and the status over the last 300 samples.
func BenchmarkSample(b *testing.B) {
	f := &fakeGateway{spend: true, refusals: map[Refusal]float64{}}
	s := New(testClasses, nil, f.read)
	for _, reason := range []string{"queue_full", "queue_wait", "evicted"} {
		for class := range testClasses {
			f.refusals[Refusal{reason, class}] = 1
		}
	}
	now := time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s.Sample(now.Add(time.Duration(i) * time.Second))
	}
}

// Observe mode's would-be refusals are counted per interval on a chart of
// their own, and are not refusals: the status does not see them.
func TestSamplerCountsWouldBeRefusalsApart(t *testing.T) {
	f := &fakeGateway{refusals: map[Refusal]float64{}, would: map[Refusal]float64{}}
	s := New(testClasses, nil, f.read)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.Sample(t0)
	f.would[Refusal{"queue_wait", "interactive"}] += 4
	d := s.Sample(t0.Add(2 * time.Second))
	if d.WouldRefuseReason["queue_wait"] != 4 || len(d.RefusedReason) != 0 {
		t.Fatalf("would refuse %v, refused %v; want 4 queue_wait and no refusal", d.WouldRefuseReason, d.RefusedReason)
	}
	if d.Status.Level != "ok" {
		t.Fatalf("status %+v after would-be refusals only, want ok", d.Status)
	}
	if d := s.Sample(t0.Add(3 * time.Second)); d.WouldRefuseReason != nil {
		t.Fatalf("a quiet second after: %v", d.WouldRefuseReason)
	}
}
