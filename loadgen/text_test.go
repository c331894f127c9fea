package loadgen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

func sampleReports() (direct, gated *Report) {
	direct = &Report{
		Target: "http://127.0.0.1:9000", Policy: "naive", Rate: 50, Seed: 1,
		WallSeconds: 58.2, WindowSeconds: 30,
		Requests: 1500, Attempts: 3900, AttemptsPerRequest: 2.6,
		Answered: 610, OnTime: 402, Late: 208, Goodput: 13.4, SuccessRatio: 0.268,
		Latency:    Latency{Count: 610, P50Ms: 7400, P90Ms: 13900, P99Ms: 14950, MaxMs: 15000},
		Unanswered: 2900, UnansweredRatio: 0.7436,
		RefusalTime: Latency{Count: 390, P50Ms: 4.2, P90Ms: 8, P99Ms: 31, MaxMs: 40},
		Classes: []ClassReport{
			{Name: "interactive", DeadlineMs: 10000, Requests: 1050, Attempts: 2800, Answered: 420, OnTime: 270, Late: 150, SuccessRatio: 0.257,
				Latency: Latency{Count: 420, P50Ms: 7600, P99Ms: 14900}},
			{Name: "batch", DeadlineMs: 30000, Requests: 300, Attempts: 700, Answered: 150, OnTime: 120, Late: 30, SuccessRatio: 0.4,
				Latency: Latency{Count: 150, P50Ms: 6900, P99Ms: 15000}},
			{Name: "speculative", DeadlineMs: 5000, Requests: 150, Attempts: 400, SuccessRatio: 0.08},
		},
		Rejections:  map[string]int{"timeout": 2900, "503": 390},
		Failures:    map[string]int{"timeout": 890, "late": 208},
		StatusCodes: map[int]int{200: 610, 503: 390},
	}
	gated = &Report{
		Target: "http://127.0.0.1:8080", Policy: "polite", Rate: 50, Seed: 1,
		WallSeconds: 40.1, WindowSeconds: 30,
		Requests: 1500, Attempts: 1710, AttemptsPerRequest: 1.14,
		Answered: 1190, OnTime: 1188, Late: 2, Goodput: 39.6, SuccessRatio: 0.792,
		Latency:       Latency{Count: 1190, P50Ms: 1450, P90Ms: 3100, P99Ms: 6020, MaxMs: 9100},
		Rejections:    map[string]int{"queue_wait": 380, "evicted": 140},
		Failures:      map[string]int{"queue_wait": 250, "evicted": 60, "late": 2},
		StatusCodes:   map[int]int{200: 1190, 503: 520},
		EstimatedWait: WaitStats{Seen: 520, MedianMs: 4200, MaxMs: 21000},
		SamePrompt:    true, AttemptHeaders: AttemptHeadersStainless,
	}
	return direct, gated
}

func ExampleWriteComparison() {
	direct, gated := sampleReports()
	fmt.Println("50 requests/s for 30s, seed 1")
	_ = WriteComparison(os.Stdout, []string{"direct", "via sluice"}, []*Report{direct, gated})
	// Output:
	// 50 requests/s for 30s, seed 1
	//                     direct  via sluice
	//             policy   naive      polite
	//           requests    1500        1500
	//   attempts/request    2.60        1.14
	//          goodput/s    13.4        39.6
	//            success   26.8%       79.2%
	//       late answers     208           2
	//                p50   7.40s       1.45s
	//                p99  14.95s       6.02s
	//    client overflow       0           0
}

func TestWriteText(t *testing.T) {
	direct, gated := sampleReports()
	var b bytes.Buffer
	if err := direct.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"naive -> http://127.0.0.1:9000",
		"1500, 3900 attempts (2.60 per request)",
		"610: 402 on time, 208 late",
		"13.4/s, success 26.8%",
		"p50 7.40s", "p99 14.95s",
		"interactive", "10.00s", "25.7%",
		"speculative", "-", // a class with no answers has no percentiles
		"timeout 2900, 503 390", // largest first
		"late 208",
		"200 610, 503 390",
		"estimated wait            none seen",
		"2900 of 3900 attempts (74.4%): no answer and no refusal by the caller's own timeout",
		"p50 4.20ms  p90 8.00ms  p99 31ms  max 40ms (390 refused attempts, sent to response headers)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("WriteText output lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	if err := gated.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"520 seen, median 4.20s, max 21.00s",
		"polite -> http://127.0.0.1:8080", "  same prompt  attempt headers stainless",
		"0 of 1710 attempts (0.0%)",
		"refusal time     no refusals",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("WriteText output lacks %q:\n%s", want, b.String())
		}
	}
}

func TestWriteComparisonRejectsMismatch(t *testing.T) {
	direct, _ := sampleReports()
	var b bytes.Buffer
	if err := WriteComparison(&b, []string{"a", "b"}, []*Report{direct}); err == nil {
		t.Error("2 names for 1 report accepted")
	}
	if err := WriteComparison(&b, nil, nil); err == nil {
		t.Error("no reports accepted")
	}
	if err := WriteComparison(&b, []string{"a"}, []*Report{nil}); err == nil {
		t.Error("nil report accepted")
	}
}

func TestReportJSONNames(t *testing.T) {
	_, gated := sampleReports()
	b, err := json.Marshal(gated)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"goodput":39.6`, `"success_ratio":0.792`, `"attempts_per_request":1.14`,
		`"p99_ms":6020`, `"status_codes":{"200":1190,"503":520}`, `"estimated_wait":{"seen":520`, `"late":2`,
		`"unanswered":0`, `"unanswered_ratio":0`, `"refusal_time":{"count":0`, `"same_prompt":true`, `"attempt_headers":"stainless"`} {
		if !bytes.Contains(b, []byte(key)) {
			t.Errorf("JSON lacks %s: %s", key, b)
		}
	}
}
