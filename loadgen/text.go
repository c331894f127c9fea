package loadgen

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteText prints r as a compact human-readable table.
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := fmt.Sprintf("%s -> %s   rate %s/s  window %s  wall %s  seed %d",
		r.Policy, r.Target, num(r.Rate), secs(r.WindowSeconds), secs(r.WallSeconds), r.Seed)
	if r.Trace {
		head = fmt.Sprintf("%s -> %s   trace replay, %s/s  window %s  wall %s",
			r.Policy, r.Target, num(r.Rate), secs(r.WindowSeconds), secs(r.WallSeconds))
	}
	if r.Stream {
		head += "  stream"
	}
	if r.SamePrompt {
		head += "  same prompt"
	}
	if r.AttemptHeaders != "" && r.AttemptHeaders != AttemptHeadersSluice {
		head += "  attempt headers " + string(r.AttemptHeaders)
	}
	if r.Interrupted {
		head += "  (INTERRUPTED: partial results)"
	}
	fmt.Fprintln(tw, head)
	fmt.Fprintf(tw, "requests\t%d, %d attempts (%.2f per request), client overflow %d\n",
		r.Requests, r.Attempts, r.AttemptsPerRequest, r.ClientOverflow)
	fmt.Fprintf(tw, "answered\t%d: %d on time, %d late\n", r.Answered, r.OnTime, r.Late)
	fmt.Fprintf(tw, "goodput\t%s/s, success %s\n", num(r.Goodput), pct(r.SuccessRatio))
	fmt.Fprintf(tw, "latency\t%s (answered requests, arrival to last byte)\n", latencyText(r.Latency))
	fmt.Fprintf(tw, "attempt latency\t%s (answered attempts, sent to last byte)\n", latencyText(r.AttemptLatency))
	fmt.Fprintf(tw, "send lag\t%s (scheduled arrival to first send: the generator's own delay)\n", latencyText(r.SendLag))
	fmt.Fprintf(tw, "unanswered\t%d of %d attempts (%s): no answer and no refusal by the caller's own timeout\n",
		r.Unanswered, r.Attempts, pct(r.UnansweredRatio))
	refusal := "no refusals"
	if r.RefusalTime.Count > 0 {
		refusal = fmt.Sprintf("%s (%d refused attempts, sent to response headers)", latencyText(r.RefusalTime), r.RefusalTime.Count)
	}
	fmt.Fprintf(tw, "refusal time\t%s\n", refusal)
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "class\tdeadline\trequests\tattempts\tsuccess\tlate\tp50\tp99")
	for _, c := range r.Classes {
		deadline := millis(c.DeadlineMs)
		if c.DeadlineMs == 0 {
			deadline = "per call" // a trace's calls carry their own
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\t%s\t%s\n", c.Name, deadline,
			c.Requests, c.Attempts, pct(c.SuccessRatio), c.Late, latMs(c.Latency, c.Latency.P50Ms), latMs(c.Latency, c.Latency.P99Ms))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "rejections (per attempt)\t%s\n", counts(r.Rejections))
	fmt.Fprintf(tw, "failures (per request)\t%s\n", counts(r.Failures))
	codes := make(map[string]int, len(r.StatusCodes))
	for code, n := range r.StatusCodes {
		codes[strconv.Itoa(code)] = n
	}
	fmt.Fprintf(tw, "status codes\t%s\n", counts(codes))
	if r.EstimatedWait.Seen > 0 {
		fmt.Fprintf(tw, "estimated wait\t%d seen, median %s, max %s\n",
			r.EstimatedWait.Seen, millis(r.EstimatedWait.MedianMs), millis(r.EstimatedWait.MaxMs))
	} else {
		fmt.Fprintf(tw, "estimated wait\tnone seen\n")
	}
	if len(r.MalformedHeaders) > 0 {
		fmt.Fprintf(tw, "malformed headers\t%s\n", counts(r.MalformedHeaders))
	}
	return tw.Flush()
}

// WriteComparison prints reports side by side, one column per report headed
// by the matching name, with the figures a reader compares first: goodput,
// success, tail latency, late answers and retry amplification.
func WriteComparison(w io.Writer, names []string, reports []*Report) error {
	if len(names) != len(reports) {
		return fmt.Errorf("loadgen: WriteComparison: %d names for %d reports", len(names), len(reports))
	}
	if len(reports) == 0 {
		return errors.New("loadgen: WriteComparison: no reports")
	}
	for i, r := range reports {
		if r == nil {
			return fmt.Errorf("loadgen: WriteComparison: report %d (%q) is nil", i, names[i])
		}
	}
	rows := []struct {
		label string
		cell  func(*Report) string
	}{
		{"policy", func(r *Report) string { return r.Policy }},
		{"requests", func(r *Report) string { return strconv.Itoa(r.Requests) }},
		{"attempts/request", func(r *Report) string { return fmt.Sprintf("%.2f", r.AttemptsPerRequest) }},
		{"goodput/s", func(r *Report) string { return num(r.Goodput) }},
		{"success", func(r *Report) string { return pct(r.SuccessRatio) }},
		{"late answers", func(r *Report) string { return strconv.Itoa(r.Late) }},
		{"p50", func(r *Report) string { return latMs(r.Latency, r.Latency.P50Ms) }},
		{"p99", func(r *Report) string { return latMs(r.Latency, r.Latency.P99Ms) }},
		{"client overflow", func(r *Report) string { return strconv.Itoa(r.ClientOverflow) }},
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "\t")
	for _, n := range names {
		fmt.Fprintf(tw, "%s\t", n)
	}
	fmt.Fprintln(tw)
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t", row.label)
		for _, r := range reports {
			fmt.Fprintf(tw, "%s\t", row.cell(r))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

func latencyText(l Latency) string {
	if l.Count == 0 {
		return "no answers"
	}
	return fmt.Sprintf("p50 %s  p90 %s  p99 %s  max %s", millis(l.P50Ms), millis(l.P90Ms), millis(l.P99Ms), millis(l.MaxMs))
}

// latMs prints one percentile, or "-" when there was nothing to measure
// (a zero would read as "instant").
func latMs(l Latency, v float64) string {
	if l.Count == 0 {
		return "-"
	}
	return millis(v)
}

func millis(v float64) string {
	if v < 10 {
		return strconv.FormatFloat(v, 'f', 2, 64) + "ms"
	}
	if v < 1000 {
		return fmt.Sprintf("%.0fms", v)
	}
	return secs(v / 1000)
}

func secs(v float64) string {
	return strconv.FormatFloat(v, 'f', 2, 64) + "s"
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func pct(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }

// counts prints a count map largest first, ties by name, so output is stable.
func counts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
