package admission_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
)

// callTheModel stands for the slow, per-call-billed dependency the gate
// protects.
func callTheModel(ctx context.Context) (string, error) { return "an answer", nil }

// The README's example, compiled and run here so that it stays true: a gate
// in front of a call, the caller's deadline in its context. Keep the two
// the same (README.md, "The library").
func ExampleGate_Acquire() {
	gate, err := admission.New(admission.Config{Concurrency: 16, MaxQueue: 256})
	if err != nil {
		log.Fatal(err) // an invalid config names the field
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // the caller's deadline
	defer cancel()

	permit, err := gate.Acquire(ctx, admission.Request{
		Class:  admission.ClassBatch, // shed after speculative work, before interactive
		Tenant: "acme",               // tenants share the slots fairly
		Key:    "gpt-4o",             // service times are kept per key
	})
	if err != nil {
		log.Fatal(err) // refused now, not late: a *admission.Rejection with Reason, EstimatedWait, RetryAfter
	}
	answer, err := callTheModel(ctx)
	permit.Done(admission.Outcome{}) // its service time feeds the wait estimate
	fmt.Println(answer, err)
	// Output: an answer <nil>
}

// TestReadmeShowsTheExample keeps the README's library example compiled:
// its first Go block must be, line for line, a run of ExampleGate_Acquire's
// body above.
func TestReadmeShowsTheExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "```go\n")
	if block, _, ok = strings.Cut(block, "```"); !ok {
		t.Fatal("README.md has no Go block")
	}
	src, err := os.ReadFile("readme_example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	var body strings.Builder
	for line := range strings.Lines(string(src)) {
		body.WriteString(strings.TrimPrefix(line, "\t"))
	}
	if !strings.Contains(body.String(), block) {
		t.Errorf("README.md's Go block is not a run of ExampleGate_Acquire's lines; make them the same:\n%s", block)
	}
}
