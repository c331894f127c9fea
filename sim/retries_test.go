package sim

import (
	"testing"

	"github.com/sluicehq/sluice/sim/scenario"
)

// TestHeadlessRetriesAreRecognised: in a 5× retry storm by callers that
// send no retry header (three attempts each, at once), the chain's
// recognise stage matches each failure to one later copy: a caller's first
// retry is recognised and charged; when the retry budget refuses it, that
// refusal leaves no failure behind (recognition must not feed itself), so
// the caller's second retry, right after, is taken for a first attempt —
// with identical bodies it cannot be told from another caller's. So more
// than half the retries are recognised, and the retries' share of upstream
// calls falls by a quarter at least against the same storm without the
// stage (sluice.recognise.disabled), where none is recognised and every
// retry reaches the provider as a first attempt; goodput holds either way.
func TestHeaderlessRetriesAreRecognised(t *testing.T) {
	sc, err := scenario.Load("../scenarios/headerless-retries.yaml")
	if err != nil {
		t.Fatal(err)
	}
	run := func(disabled bool) *Result {
		sc.Sluice.Recognise.Disabled = disabled
		r, err := Run(t.Context(), sc, "sluice", headlineLoad, Options{Requests: headlineRequests()})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("recognise disabled %v: %d retries without a header, %d recognised (%.1f%%), %d first attempts taken for retries; retries %d of %d upstream calls (%.1f%%); goodput %.1f%%",
			disabled, r.UndeclaredRetries, r.RetriesRecognised, 100*ratio(r.RetriesRecognised, r.UndeclaredRetries),
			r.FirstsRecognised, r.BilledRetries, r.Billed, 100*ratio(r.BilledRetries, r.Billed), r.GoodputPct)
		return r
	}
	r := run(false)
	if r.UndeclaredRetries < r.Requests/10 {
		t.Fatalf("only %d retries for %d requests: not a storm", r.UndeclaredRetries, r.Requests)
	}
	if got := ratio(r.RetriesRecognised, r.UndeclaredRetries); got < 0.5 {
		t.Errorf("%.1f%% of retries recognised, want more than half", 100*got)
	}
	if r.FirstsRecognised != 0 {
		t.Errorf("%d first attempts (each its own prompt) taken for retries", r.FirstsRecognised)
	}
	off := run(true)
	if off.RetriesRecognised != 0 {
		t.Errorf("recognised %d retries with the stage disabled", off.RetriesRecognised)
	}
	on, without := ratio(r.BilledRetries, r.Billed), ratio(off.BilledRetries, off.Billed)
	if on > 0.75*without {
		t.Errorf("retries are %.1f%% of upstream calls, %.1f%% without the stage: want a quarter less at least", 100*on, 100*without)
	}
	for _, x := range []*Result{r, off} {
		if x.GoodputPct < 95 {
			t.Errorf("goodput %.1f%% of capacity, want ≥ 95%%", x.GoodputPct)
		}
	}
}

// TestRepeatedSamplingIsNotRetrying: one prompt, sent byte for byte the
// same by every request without a header, many copies in flight at once,
// all answered: not one is taken for a retry.
func TestRepeatedSamplingIsNotRetrying(t *testing.T) {
	r := runHeadlineN(t, "repeated-sampling", "sluice", 0.5, headlineRequests()/2)
	if r.OnTime != r.Requests || r.Retries != 0 {
		t.Fatalf("%d of %d answered on time, %d retries: the scenario must be all successes", r.OnTime, r.Requests, r.Retries)
	}
	if r.FirstsRecognised != 0 || r.RetriesRecognised != 0 {
		t.Errorf("%d requests of one prompt taken for retries, want 0", r.FirstsRecognised+r.RetriesRecognised)
	}
}
