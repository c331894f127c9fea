package sim

import (
	"testing"
)

// TestHeadlessRetriesAreRecognised: in a 5× retry storm by callers that
// send no retry header, the chain's recognise stage takes at least 90% of
// their retries for retries, and so the retry budget holds the retries'
// share of upstream calls within its ratio (0.1) + 5 points. Without the
// stage (sluice.recognise.disabled) none is recognised, and the storm's
// retries reach the provider as first attempts.
func TestHeaderlessRetriesAreRecognised(t *testing.T) {
	sc, err := LoadScenario("../scenarios/headerless-retries.yaml")
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
	if got := ratio(r.RetriesRecognised, r.UndeclaredRetries); got < 0.9 {
		t.Errorf("%.1f%% of retries recognised, want ≥ 90%%", 100*got)
	}
	if got := ratio(r.BilledRetries, r.Billed); got > 0.1+0.05 {
		t.Errorf("retries are %.1f%% of upstream calls, want ≤ the budget's 10%% + 5 points", 100*got)
	}
	if r.FirstsRecognised != 0 {
		t.Errorf("%d first attempts (each its own prompt) taken for retries", r.FirstsRecognised)
	}
	off := run(true)
	if off.RetriesRecognised != 0 {
		t.Errorf("recognised %d retries with the stage disabled", off.RetriesRecognised)
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
