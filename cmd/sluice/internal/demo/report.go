package demo

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/loadgen"
)

func (r *Result) write(w io.Writer) error {
	if err := loadgen.WriteComparison(w, []string{"direct", "through sluice"}, []*loadgen.Report{r.Direct.Load, r.Sluice.Load}); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(label string, f func(Storm) string) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t\n", label, f(r.Direct), f(r.Sluice))
	}
	row("goodput / capacity", func(x Storm) string { return fmt.Sprintf("%.0f%%", 100*x.GoodputShare(r.Capacity)) })
	row("provider calls billed", func(x Storm) string { return fmt.Sprint(x.Upstream.Started) })
	row("  answers nobody got", func(x Storm) string {
		return fmt.Sprintf("%d (%.1f%%)", x.Upstream.Wasted+x.Upstream.Aborted, 100*x.WastedShare())
	})
	row("  spend on them", func(x Storm) string {
		return fmt.Sprintf("$%.4f of $%.4f", x.Upstream.WastedCostUSD, x.Upstream.CostUSD)
	})
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	d, s := r.Direct, r.Sluice
	fmt.Fprintf(w, "Straight at the provider the queue became the outage: %.0f%% of requests answered in time, and %.0f%% of\n",
		100*d.Load.SuccessRatio, 100*d.WastedShare())
	fmt.Fprintf(w, "the calls it billed produced answers nobody received. Through sluice, %.0f%% of capacity went to answers\n",
		100*s.GoodputShare(r.Capacity))
	fmt.Fprintf(w, "delivered in time (%.1f/s against %.1f/s), and %.1f%% of billed calls were wasted; the rest were refused at\n",
		s.Load.Goodput, d.Load.Goodput, 100*s.WastedShare())
	fmt.Fprintf(w, "once with 503, Retry-After and the estimated wait (reasons: %s).\n", reasons(s.Load.Rejections))
	if b := s.Books; b != nil {
		fmt.Fprintf(w, "sluice's own books for that run: spent $%.4f (the provider billed $%.4f), of which $%.4f on answers nobody\n",
			b.SpentUSD, s.Upstream.CostUSD, b.WastedUSD)
		fmt.Fprintf(w, "received; hanging up on them early saved an estimated $%.4f.\n", b.SavedUSD)
	}
	fmt.Fprintln(w)

	if r.Estimate != nil {
		e := r.Estimate
		fmt.Fprintf(w, "Mid-storm, GET /sluice/v1/estimate?priority=interactive&timeout_ms=3000 answered:\n")
		fmt.Fprintf(w, "  admit=%v reason=%q estimated_wait_ms=%d service_p50_ms=%d service_p95_ms=%d\n",
			e.Admit, e.Reason, e.EstimatedWaitMs, e.ServiceP50Ms, e.ServiceP95Ms)
	}
	if len(r.Metrics) > 0 {
		fmt.Fprintf(w, "and the admin listener's /metrics said, among others:\n")
		for _, l := range r.Metrics {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	fmt.Fprintf(w, `
Where to look next, with the pieces running on their own:
  go run ./cmd/sluice mock --listen 127.0.0.1:8081 &
  go run ./cmd/sluice serve --upstream http://127.0.0.1:8081 --concurrency 8 --max-queue 64 &
  go run ./cmd/sluice load --target http://127.0.0.1:8080 --rate 100 --duration 30s
  curl -s 'http://127.0.0.1:8080/sluice/v1/estimate?priority=interactive&timeout_ms=3000'
  curl -s http://127.0.0.1:9090/metrics | grep ^sluice_
  curl -s http://127.0.0.1:9090/admin/v1/state
`)
	return nil
}

func reasons(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	out := ""
	for _, k := range []string{contract.ReasonQueueWait, contract.ReasonQueueFull, contract.ReasonEvicted, contract.ReasonExpired, loadgen.ReasonTimeout, loadgen.ReasonConnectionError} {
		if n := m[k]; n > 0 {
			if out != "" {
				out += ", "
			}
			out += fmt.Sprintf("%s %d", k, n)
		}
	}
	return out
}
