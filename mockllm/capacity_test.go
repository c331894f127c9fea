package mockllm

import (
	"context"
	"math"
	"net/http"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// Capacity tests run the handler in virtual time: with Sigma 0 every
// service time is exact, so completion times are exact too.

func TestQueueServesInWaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, Config{Slots: 4, Median: time.Second})
		start := time.Now()
		var done []<-chan result
		for range 8 {
			done = append(done, serveAsync(s, newReq(t.Context(), PathChatCompletions, chatBody("m", "hi", 0, false)), start))
		}
		synctest.Wait()
		if st := s.Stats(); st.InService != 4 || st.QueueDepth != 4 || st.Started != 4 {
			t.Fatalf("after arrival: in service %d, queued %d, started %d; want 4, 4, 4", st.InService, st.QueueDepth, st.Started)
		}
		var finish []time.Duration
		queueMs := map[string]int{}
		for _, ch := range done {
			r := <-ch
			if r.rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", r.rec.Code, r.rec.Body)
			}
			finish = append(finish, r.elapsed)
			queueMs[r.rec.Header().Get("X-Mock-Queue-Ms")]++
		}
		slices.Sort(finish)
		want := []time.Duration{1, 1, 1, 1, 2, 2, 2, 2}
		for i := range want {
			want[i] *= time.Second
		}
		if !slices.Equal(finish, want) {
			t.Errorf("finish times %v, want %v (the second wave waits exactly one service time)", finish, want)
		}
		if queueMs["0"] != 4 || queueMs["1000"] != 4 {
			t.Errorf("X-Mock-Queue-Ms counts %v, want 4 × 0 and 4 × 1000", queueMs)
		}
		st := s.Stats()
		if st.Started != 8 || st.Delivered != 8 || st.Completed != 8 || st.Wasted != 0 || st.InService != 0 || st.QueueDepth != 0 {
			t.Errorf("stats %+v, want 8 started, completed and delivered, none left", st)
		}
	})
}

func TestQueueIsFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, Config{Slots: 1, Median: time.Second})
		start := time.Now()
		var done []<-chan result
		for range 5 {
			done = append(done, serveAsync(s, newReq(t.Context(), PathChatCompletions, chatBody("m", "hi", 0, false)), start))
			synctest.Wait() // fixes the arrival order
		}
		for i, ch := range done {
			if got, want := (<-ch).elapsed, time.Duration(i+1)*time.Second; got != want {
				t.Errorf("request %d finished at %v, want %v", i, got, want)
			}
		}
	})
}

func TestMode429RefusesBeyondSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, Config{Slots: 2, Mode: Mode429, Median: 3 * time.Second})
		start := time.Now()
		a := serveAsync(s, newReq(t.Context(), PathChatCompletions, chatBody("m", "hi", 0, false)), start)
		b := serveAsync(s, newReq(t.Context(), PathChatCompletions, chatBody("m", "hi", 0, false)), start)
		synctest.Wait()
		r := <-serveAsync(s, newReq(t.Context(), PathChatCompletions, chatBody("m", "hi", 0, false)), start)
		if r.rec.Code != http.StatusTooManyRequests || r.elapsed != 0 {
			t.Fatalf("third request: status %d after %v, want 429 at once", r.rec.Code, r.elapsed)
		}
		h := r.rec.Header()
		for k, want := range map[string]string{
			"Retry-After": "3", "retry-after-ms": "3000", "x-ratelimit-remaining-requests": "0",
		} {
			if got := h.Get(k); got != want {
				t.Errorf("header %s = %q, want %q", k, got, want)
			}
		}
		body := decode(t, r.rec.Body)
		if code := field(t, body, "error", "code"); code != "rate_limit_exceeded" {
			t.Errorf("error code %v, want rate_limit_exceeded", code)
		}
		for _, ch := range []<-chan result{a, b} {
			if r := <-ch; r.rec.Code != http.StatusOK || r.elapsed != 3*time.Second {
				t.Errorf("admitted request: status %d at %v, want 200 at 3s", r.rec.Code, r.elapsed)
			}
		}
		if st := s.Stats(); st.Rejected429 != 1 || st.Started != 2 || st.Received != 3 {
			t.Errorf("stats %+v, want 1 rejected, 2 started, 3 received", st)
		}
	})
}

func TestStepFactorSlowsLaterRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, Config{Median: time.Second, StepAt: 10 * time.Second, StepFactor: 3})
		took := func() time.Duration {
			start := time.Now()
			r := <-serveAsync(s, newReq(t.Context(), PathChatCompletions, chatBody("m", "hi", 0, false)), start)
			if r.rec.Code != http.StatusOK {
				t.Fatalf("status %d", r.rec.Code)
			}
			return r.elapsed
		}
		if d := took(); d != time.Second {
			t.Errorf("before the step: %v, want 1s", d)
		}
		time.Sleep(8*time.Second + 500*time.Millisecond) // virtual: now 9.5s
		if d := took(); d != time.Second {
			t.Errorf("started just before the step: %v, want 1s (the step applies at start)", d)
		}
		time.Sleep(time.Second) // now 11.5s
		if d := took(); d != 3*time.Second {
			t.Errorf("after the step: %v, want 3s", d)
		}
	})
}

func TestModelTableSetsSpeedAndPrice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, Config{Median: time.Second, Models: map[string]ModelSpec{
			"slow":          {LatencyFactor: 2, InputUSDPerMTok: 1_000_000, OutputUSDPerMTok: 2_000_000},
			"fast":          {LatencyFactor: 0.25},
			DefaultModelKey: {InputUSDPerMTok: 10},
		}})
		for _, tc := range []struct {
			model string
			want  time.Duration
			cost  float64
		}{
			// "abcdefgh" is 2 prompt tokens; max_tokens 3.
			{"slow", 2 * time.Second, 2*1 + 3*2},
			{"fast", 250 * time.Millisecond, 0},
			{"unknown", time.Second, 2 * 10 / 1e6},
		} {
			before := s.Stats().CostUSD
			start := time.Now()
			r := <-serveAsync(s, newReq(t.Context(), PathChatCompletions, chatBody(tc.model, "abcdefgh", 3, false)), start)
			if r.elapsed != tc.want {
				t.Errorf("%s: took %v, want %v", tc.model, r.elapsed, tc.want)
			}
			if got := s.Stats().CostUSD - before; math.Abs(got-tc.cost) > 1e-12 {
				t.Errorf("%s: cost %v, want %v", tc.model, got, tc.cost)
			}
			if m := field(t, decode(t, r.rec.Body), "model"); m != tc.model {
				t.Errorf("response model %v, want the requested %q", m, tc.model)
			}
		}
	})
}

func TestBuiltinModelsHaveTheDocumentedShape(t *testing.T) {
	m := BuiltinModels()
	big, small := m["gpt-4o"], m["gpt-4o-mini"]
	if !(big.LatencyFactor > small.LatencyFactor && big.OutputUSDPerMTok > small.OutputUSDPerMTok) {
		t.Errorf("gpt-4o %+v should be slower and dearer than gpt-4o-mini %+v", big, small)
	}
	if _, ok := m[DefaultModelKey]; !ok {
		t.Error("no default row")
	}
	m["gpt-4o"] = ModelSpec{}
	if BuiltinModels()["gpt-4o"] != big {
		t.Error("BuiltinModels returned the shared table, not a copy")
	}
}

func TestZeroMedianAnswersWithoutWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, Config{Slots: 1})
		start := time.Now()
		for _, stream := range []bool{false, true} {
			r := <-serveAsync(s, newReq(t.Context(), PathChatCompletions, chatBody("m", "hi", 40, stream)), start)
			if r.rec.Code != http.StatusOK || r.elapsed != 0 {
				t.Errorf("stream=%v: status %d after %v, want 200 at once", stream, r.rec.Code, r.elapsed)
			}
		}
	})
}

func TestAbandonedInQueueIsNotBilled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, Config{Slots: 1, Median: time.Second})
		start := time.Now()
		a := serveAsync(s, newReq(t.Context(), PathChatCompletions, chatBody("m", "hi", 10, false)), start)
		synctest.Wait()
		ctx, leave := context.WithCancel(t.Context())
		b := serveAsync(s, newReq(ctx, PathChatCompletions, chatBody("m", "hi", 10, false)), start)
		synctest.Wait()
		c := serveAsync(s, newReq(t.Context(), PathChatCompletions, chatBody("m", "hi", 10, false)), start)
		synctest.Wait()
		if st := s.Stats(); st.QueueDepth != 2 {
			t.Fatalf("queue depth %d, want 2", st.QueueDepth)
		}

		time.Sleep(500 * time.Millisecond)
		leave()
		if r := <-b; r.elapsed != 500*time.Millisecond {
			t.Errorf("abandoned request returned at %v, want 500ms", r.elapsed)
		}
		if st := s.Stats(); st.QueueDepth != 1 || st.Abandoned != 1 {
			t.Errorf("after leaving: queue %d, abandoned %d; want 1, 1", st.QueueDepth, st.Abandoned)
		}
		<-a
		if r := <-c; r.elapsed != 2*time.Second {
			t.Errorf("request behind the abandoned one finished at %v, want 2s (it moved up)", r.elapsed)
		}
		st := s.Stats()
		if st.Started != 2 || st.TokensOut != 20 || st.Wasted != 0 || st.WastedCostUSD != 0 {
			t.Errorf("stats %+v: the abandoned request was billed", st)
		}
	})
}

// A client that leaves mid-service does not stop a provider that keeps
// generating: the slot stays taken and the whole answer is billed, for
// nobody.
func TestClientLeavingMidServiceIsWasted(t *testing.T) {
	for _, stream := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			s := newServer(t, Config{Slots: 1, Median: time.Second})
			start := time.Now()
			ctx, leave := context.WithCancel(t.Context())
			a := serveAsync(s, newReq(ctx, PathChatCompletions, chatBody("m", "hi", 100, stream)), start)
			synctest.Wait()
			b := serveAsync(s, newReq(t.Context(), PathChatCompletions, chatBody("m", "hi", 100, stream)), start)
			time.Sleep(300 * time.Millisecond)
			leave()
			if r := <-a; r.elapsed != time.Second {
				t.Errorf("stream=%v: the left request held its slot until %v, want 1s", stream, r.elapsed)
			}
			if r := <-b; r.elapsed != 2*time.Second {
				t.Errorf("stream=%v: the next request finished at %v, want 2s", stream, r.elapsed)
			}
			st := s.Stats()
			one := lookupModel(s.models, "m").Cost(1, 100)
			if st.Wasted != 1 || st.Delivered != 1 || st.Completed != 2 || st.Aborted != 0 ||
				st.TokensOut != 200 || st.WastedCostUSD != one {
				t.Errorf("stream=%v: stats %+v, want 1 wasted (cost %v) and 1 delivered", stream, st, one)
			}
		})
	}
}

func TestAbortOnDisconnectFreesTheSlot(t *testing.T) {
	for _, stream := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			s := newServer(t, Config{Slots: 1, Median: time.Second, AbortOnDisconnect: true})
			start := time.Now()
			ctx, leave := context.WithCancel(t.Context())
			a := serveAsync(s, newReq(ctx, PathChatCompletions, chatBody("m", "hi", 100, stream)), start)
			synctest.Wait()
			b := serveAsync(s, newReq(t.Context(), PathChatCompletions, chatBody("m", "hi", 100, stream)), start)
			time.Sleep(300 * time.Millisecond)
			leave()
			if r := <-a; r.elapsed != 300*time.Millisecond {
				t.Errorf("stream=%v: aborted at %v, want 300ms", stream, r.elapsed)
			}
			if r := <-b; r.elapsed != 1300*time.Millisecond {
				t.Errorf("stream=%v: the next request finished at %v, want 1.3s", stream, r.elapsed)
			}
			st := s.Stats()
			partial := lookupModel(s.models, "m").Cost(1, 30)
			if st.Aborted != 1 || st.Wasted != 0 || st.Delivered != 1 || st.TokensOut != 130 || st.WastedCostUSD != partial {
				t.Errorf("stream=%v: stats %+v, want 1 aborted billed 30 tokens (%v)", stream, st, partial)
			}
		})
	}
}

func TestCloseEndsQueuedHangingAndRunningWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := New(Config{Slots: 1, Median: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		running := serveAsync(s, newReq(t.Context(), PathChatCompletions, chatBody("m", "hi", 0, false)), start)
		synctest.Wait()
		queued := serveAsync(s, newReq(t.Context(), PathChatCompletions, chatBody("m", "hi", 0, false)), start)
		hanging := serveAsync(s, newReq(t.Context(), PathChatCompletions, chatBody("m", "hi", 0, false), HeaderFault, "hang"), start)
		synctest.Wait()
		if st := s.Stats(); st.InService != 1 || st.QueueDepth != 1 || st.Hanging != 1 {
			t.Fatalf("before Close: %+v", st)
		}
		time.Sleep(time.Minute)
		s.Close()
		for name, ch := range map[string]<-chan result{"running": running, "queued": queued, "hanging": hanging} {
			if r := <-ch; r.rec.Code != http.StatusServiceUnavailable || r.elapsed != time.Minute {
				t.Errorf("%s: status %d at %v, want 503 at Close", name, r.rec.Code, r.elapsed)
			}
		}
		st := s.Stats()
		if st.Aborted != 1 || st.Dropped != 1 || st.Faults.Hang != 1 || st.InService != 0 || st.QueueDepth != 0 || st.Hanging != 0 {
			t.Errorf("after Close: %+v", st)
		}
		if r := <-serveAsync(s, newReq(t.Context(), PathChatCompletions, chatBody("m", "hi", 0, false)), start); r.rec.Code != http.StatusServiceUnavailable {
			t.Errorf("after Close: status %d, want 503", r.rec.Code)
		}
	})
}

// A hanging request ends when its client leaves, without an answer.
func TestHangEndsWhenClientLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, Config{HangRate: 1})
		ctx, leave := context.WithTimeout(t.Context(), 42*time.Second)
		defer leave()
		r := <-serveAsync(s, newReq(ctx, PathChatCompletions, chatBody("m", "hi", 0, false)), time.Now())
		if r.elapsed != 42*time.Second {
			t.Errorf("hang ended after %v, want the client's 42s", r.elapsed)
		}
		if st := s.Stats(); st.Faults.Hang != 1 || st.Started != 0 || st.Hanging != 0 {
			t.Errorf("stats %+v, want one hang, nothing started", st)
		}
	})
}

// The stats add up as documented once nothing is in flight.
func TestStatsInvariants(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, Config{Slots: 2, Median: time.Second, Sigma: 0.8, Seed: 7, ErrorRate: 0.1, HangRate: 0.05, ResetRate: 0})
		start := time.Now()
		var done []<-chan result
		for i := range 60 {
			ctx, leave := context.WithTimeout(t.Context(), time.Duration(1+i%7)*time.Second)
			defer leave()
			body := chatBody("gpt-4o-mini", "some prompt text", 20, i%2 == 0)
			if i%13 == 0 {
				body = "{not json"
			}
			done = append(done, serveAsync(s, newReq(ctx, PathChatCompletions, body), start))
			time.Sleep(200 * time.Millisecond)
		}
		for _, ch := range done {
			<-ch
		}
		st := s.Stats()
		if got := st.BadRequests + st.Faults.Total() + st.Rejected429 + st.Abandoned + st.Dropped + st.Started; got != st.Received {
			t.Errorf("outcomes of received add up to %d, want %d: %+v", got, st.Received, st)
		}
		if st.Delivered+st.Wasted+st.Aborted != st.Started || st.Delivered+st.Wasted != st.Completed {
			t.Errorf("outcomes of started do not add up: %+v", st)
		}
		if st.Abandoned == 0 || st.Wasted == 0 || st.Delivered == 0 || st.Faults.Error == 0 || st.Faults.Hang == 0 {
			t.Errorf("the scenario should exercise every outcome: %+v", st)
		}
		if !(st.WastedCostUSD > 0 && st.WastedCostUSD < st.CostUSD) {
			t.Errorf("wasted cost %v should be a part of the cost %v", st.WastedCostUSD, st.CostUSD)
		}
	})
}
