package workload

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// Azure's LLM inference traces are read as they are published: a date
// with seven digits of fraction, and their column names.
func TestReadCSVReadsAzuresForm(t *testing.T) {
	in := "TIMESTAMP,ContextTokens,GeneratedTokens\n" +
		"2023-11-16 18:15:46.6805900,374,44\n" +
		"2023-11-16 18:15:50.9951690,396,109\n" +
		"2023-11-16 18:15:46.1805900,879,45\n"
	tr, err := ReadCSV(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Call{
		{At: 0, PromptTokens: 879, OutputTokens: 45},
		{At: 500 * time.Millisecond, PromptTokens: 374, OutputTokens: 44},
		{At: 4814579 * time.Microsecond, PromptTokens: 396, OutputTokens: 109},
	}
	if !slices.Equal(tr.Calls, want) {
		t.Fatalf("calls %+v, want %+v (in order of arrival, from the earliest)", tr.Calls, want)
	}
	if got := tr.Services(); !slices.Equal(got, []string{""}) {
		t.Errorf("services %q, want one unnamed", got)
	}
}

func TestWriteCSVReadsBack(t *testing.T) {
	tr := &Trace{Calls: []Call{
		{At: 0, Service: "chat", PromptTokens: 900, OutputTokens: 120, MaxTokens: 1024, Deadline: 10 * time.Second},
		{At: 1500 * time.Millisecond, Service: "code", PromptTokens: 1500, OutputTokens: 13},
	}}
	var buf bytes.Buffer
	if err := tr.WriteCSV(&buf); err != nil {
		t.Fatal(err)
	}
	back, err := ReadCSV(&buf)
	if err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	if !slices.Equal(back.Calls, tr.Calls) {
		t.Fatalf("read back %+v, want %+v", back.Calls, tr.Calls)
	}
}

// A bad cell is an error naming its line and its column, never a guess.
func TestReadCSVNamesTheBadCell(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		line           int
	}{
		{"no time column", "prompt_tokens,output_tokens\n1,2\n", "no time column", 1},
		{"no output column", "timestamp,prompt_tokens\n0,2\n", "no output column", 1},
		{"negative tokens", "timestamp,prompt_tokens,output_tokens\n0,1,2\n1,-3,2\n", "column prompt_tokens", 3},
		{"bad time", "timestamp,prompt_tokens,output_tokens\nyesterday,1,2\n", "column timestamp", 2},
		{"mixed times", "timestamp,prompt_tokens,output_tokens\n1.5,1,2\n2023-11-16 18:15:46.6805900,1,2\n", "mixes dates", 3},
		{"answer past max_tokens", "timestamp,prompt_tokens,output_tokens,max_tokens\n0,1,300,256\n", "more than its max_tokens", 2},
		{"bad deadline", "timestamp,prompt_tokens,output_tokens,deadline_ms\n0,1,3,0\n", "column deadline_ms", 2},
		{"empty time", "timestamp,prompt_tokens,output_tokens\n,1,3\n", "empty", 2},
		{"two time columns", "timestamp,time,prompt_tokens,output_tokens\n", "a second time column", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadCSV(strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one saying %q", err, tc.want)
			}
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Line != tc.line {
				t.Fatalf("err %v, want a *ParseError at line %d", err, tc.line)
			}
		})
	}
	for _, in := range []string{"", "timestamp,prompt_tokens,output_tokens\n"} {
		if _, err := ReadCSV(strings.NewReader(in)); err == nil {
			t.Errorf("%q: no error for a trace without calls", in)
		}
	}
}

func TestServiceModel(t *testing.T) {
	m := ProductionModel()
	if got, want := m.Median(1000, 200), 50*time.Millisecond+20*time.Millisecond+400*time.Millisecond; got != want {
		t.Errorf("median of a 1,000-token prompt and a 200-token answer %v, want %v", got, want)
	}
	if got, want := m.Time(1000, 200, 1), time.Duration(float64(470*time.Millisecond)*math.Exp(0.2)); got != want {
		t.Errorf("time at z=1 %v, want %v", got, want)
	}
	if err := (ServiceModel{Sigma: 4}).Validate(); err == nil || !strings.Contains(err.Error(), "sigma") {
		t.Errorf("sigma 4: %v, want an error naming sigma", err)
	}
	if err := (ServiceModel{PerOutputToken: -1}).Validate(); err == nil || !strings.Contains(err.Error(), "per_output_token") {
		t.Errorf("a negative part: %v, want an error naming it", err)
	}
}

// The production shape is what it says: the services' shares and sizes,
// the rate between bursts, and bursts well above it.
func TestProductionShape(t *testing.T) {
	sh := ProductionShape()
	sh.Span, sh.Rate = 10*time.Minute, 40
	tr, err := sh.Trace(7)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := sh.Trace(7)
	if !slices.Equal(tr.Calls, again.Calls) {
		t.Fatal("two traces of one seed differ")
	}
	// Most ten-second stretches are between bursts, at the rate.
	var per10 []float64
	for from := time.Duration(0); from+10*time.Second <= sh.Span; from += 10 * time.Second {
		per10 = append(per10, float64(len(tr.Window(from, from+10*time.Second).Calls))/10)
	}
	slices.Sort(per10)
	if med := per10[len(per10)/2]; math.Abs(med-40)/40 > 0.1 {
		t.Errorf("median rate of ten-second stretches %.1f a second, want the rate between bursts, 40 ± 10%%", med)
	}
	by := map[string][]Call{}
	for _, c := range tr.Calls {
		by[c.Service] = append(by[c.Service], c)
	}
	share := float64(len(by["chat"])) / float64(len(tr.Calls))
	if math.Abs(share-2.0/3) > 0.03 {
		t.Errorf("chat is %.2f of the calls, want 2/3", share)
	}
	stats := func(cs []Call, out bool) (median, mean float64, hi int) {
		var xs []float64
		for _, c := range cs {
			n := c.PromptTokens
			if out {
				n = c.OutputTokens
			}
			xs = append(xs, float64(n))
			hi = max(hi, n)
		}
		slices.Sort(xs)
		var sum float64
		for _, x := range xs {
			sum += x
		}
		return xs[len(xs)/2], sum / float64(len(xs)), hi
	}
	if med, mean, hi := stats(by["chat"], true); med < 115 || med > 145 || mean < 180 || mean > 230 || hi > 1000 {
		t.Errorf("chat answers: median %.0f, mean %.0f, longest %d; want about 129, 200, at most 1,000", med, mean, hi)
	}
	if med, mean, hi := stats(by["code"], true); med < 11 || med > 15 || mean < 23 || mean > 33 || hi > 256 {
		t.Errorf("code answers: median %.0f, mean %.0f, longest %d; want about 13, 28, at most 256", med, mean, hi)
	}
	if med, _, _ := stats(by["chat"], false); med < 900 || med > 1100 {
		t.Errorf("chat prompts: median %.0f, want about 1,000", med)
	}
	// Bursts: the busiest ten seconds carry at least twice the mean rate.
	busiest := 0
	for i, j := 0, 0; i < len(tr.Calls); i++ {
		for tr.Calls[i].At-tr.Calls[j].At > 10*time.Second {
			j++
		}
		busiest = max(busiest, i-j+1)
	}
	if float64(busiest)/10 < 2*40 {
		t.Errorf("the busiest 10 s carry %.0f calls a second, want at least twice the mean (80)", float64(busiest)/10)
	}
	// At a rate chosen for a load, the trace offers about that load
	// between bursts.
	m := ProductionModel()
	calm := sh
	calm.BurstEvery = 0
	calm.Rate = calm.RateFor(m, 16, 1)
	tr, _ = calm.Trace(3)
	if l := tr.Load(m, 16); math.Abs(l-1) > 0.08 {
		t.Errorf("a trace made at the rate for load 1 offers %.2f", l)
	}
	faster, err := tr.AtLoad(m, 16, 2)
	if err != nil {
		t.Fatal(err)
	}
	if l := faster.Load(m, 16); math.Abs(l-2) > 1e-6 {
		t.Errorf("AtLoad(2) offers %v", l)
	}
}

func TestShapeValidateNamesTheField(t *testing.T) {
	sh := ProductionShape()
	sh.Rate, sh.Span = 10, time.Minute
	if err := sh.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := sh
	bad.Services = append([]Service(nil), sh.Services...)
	bad.Services[1].Deadline = 0
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "services[1].deadline") {
		t.Errorf("err %v, want services[1].deadline", err)
	}
	bad = sh
	bad.BurstFor = [2]time.Duration{10 * time.Second, 60 * time.Second}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "burst_for") {
		t.Errorf("err %v, want burst_for", err)
	}
}

// Earliest deadline first serves what first come first served cannot: a
// short job with a near deadline behind long ones with time to spare.
func TestBoundIsEarliestDeadlineFirst(t *testing.T) {
	s := time.Second
	jobs := []Job{
		{At: 0, Deadline: 10 * s, Service: 2 * s, Margin: 2 * s, Group: 0},
		{At: 0, Deadline: 10 * s, Service: 2 * s, Margin: 2 * s, Group: 0},
		{At: 100 * time.Millisecond, Deadline: 1 * s, Service: 500 * time.Millisecond, Margin: 500 * time.Millisecond, Group: 1},
	}
	// One slot: the first long job starts at 0 (the short one has not
	// arrived); the short one's margin no longer fits when it frees (2s).
	r := Bound(jobs, 1)
	if r.OnTime != 2 || r.Started != 2 || !slices.Equal(r.OnTimeBy, []int{2, 0}) {
		t.Errorf("one slot: %+v, want both long jobs on time, the short one dropped unstarted", r)
	}
	// Two slots: the long jobs take both; the short one is dropped.
	// Three: everything on time.
	if r := Bound(jobs, 3); r.OnTime != 3 {
		t.Errorf("three slots: %+v, want all three on time", r)
	}
	// The earliest deadline goes first: with the second long job arriving
	// after the short one, one slot serves the short one before it.
	jobs[1].At = 200 * time.Millisecond
	jobs[0].Service = 50 * time.Millisecond
	r = Bound(jobs, 1)
	if r.OnTime != 3 {
		t.Errorf("one slot, the short job due first: %+v, want all three on time", r)
	}
	// A job that would end late is still started when its margin fits:
	// the margin is its service's statistics, not its own luck.
	late := []Job{{At: 0, Deadline: s, Service: 2 * s, Margin: 500 * time.Millisecond}}
	if r := Bound(late, 1); r.Started != 1 || r.OnTime != 0 {
		t.Errorf("an unlucky job: %+v, want it started and late", r)
	}
}
