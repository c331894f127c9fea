package mockllm

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"
)

// These tests are named TestMock… so that the mock's focused run,
// go test ./mockllm/ -run Mock, includes them.

// ServiceSeconds sums the slot time of settled requests: the whole service
// time of a completed one, wherever it came from (draw or header), and
// only the time an aborted one held before it stopped. Queueing is not
// service.
func TestMockServiceSecondsIsSlotTime(t *testing.T) {
	for _, tc := range []struct {
		name  string
		abort bool
		want  time.Duration
	}{
		// The client that leaves at 300ms is wasted: its slot stays taken
		// for the whole 5s.
		{"keep generating", false, (1000 + 250 + 1234 + 5000) * time.Millisecond},
		// It is aborted at 300ms and its slot goes to the next request.
		{"abort on disconnect", true, (1000 + 250 + 1234 + 300) * time.Millisecond},
	} {
		synctest.Test(t, func(t *testing.T) {
			s := newServer(t, Config{Slots: 2, Median: time.Second, AbortOnDisconnect: tc.abort})
			start := time.Now()
			ctx, leave := context.WithCancel(t.Context())
			body := chatBody("m", "hi", 10, false)
			left := serveAsync(s, newReq(ctx, PathChatCompletions, body, HeaderLatencyMs, "5000"), start)
			synctest.Wait()
			drawn := serveAsync(s, newReq(t.Context(), PathChatCompletions, body), start) // Median, sigma 0: 1s
			synctest.Wait()
			queued := serveAsync(s, newReq(t.Context(), PathChatCompletions, chatBody("m", "hi", 10, true), HeaderLatencyMs, "250"), start)
			synctest.Wait()
			last := serveAsync(s, newReq(t.Context(), PathChatCompletions, body, HeaderLatencyMs, "1234"), start)
			time.Sleep(300 * time.Millisecond)
			leave()
			for _, ch := range []<-chan result{left, drawn, queued, last} {
				<-ch
			}
			rec := (<-serveAsync(s, httptest.NewRequestWithContext(t.Context(), http.MethodGet, PathStats, nil), start)).rec
			st := s.Stats()
			if st.Completed+st.Aborted != 4 || (st.Aborted == 1) != tc.abort {
				t.Fatalf("%s: stats %+v, want 4 settled, the leaver aborted only with AbortOnDisconnect", tc.name, st)
			}
			if st.ServiceSeconds != tc.want.Seconds() {
				t.Errorf("%s: ServiceSeconds %v, want %v", tc.name, st.ServiceSeconds, tc.want.Seconds())
			}
			if got := field(t, decode(t, rec.Body), "service_seconds"); got != tc.want.Seconds() {
				t.Errorf("%s: GET %s service_seconds %v, want %v", tc.name, PathStats, got, tc.want.Seconds())
			}
		})
	}
}

// With Sigma > 0, ServiceSeconds is the sum of the lognormal draws
// themselves: a second server with the same seed draws the same sequence.
func TestMockServiceSecondsSumsTheDraws(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{Slots: 1, Median: time.Second, Sigma: 0.5, Seed: 1}
		s, twin := newServer(t, cfg), newServer(t, cfg)
		var want time.Duration
		for range 20 {
			want += twin.serviceTime(lookupModel(twin.models, "m"), 1, 10, twin.start)
			if r := <-serveAsync(s, newReq(t.Context(), PathChatCompletions, chatBody("m", "hi", 10, false)), time.Now()); r.rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", r.rec.Code, r.rec.Body)
			}
		}
		if want == 20*time.Second {
			t.Fatal("the draws are all the median: the test cannot tell a draw from the nominal time")
		}
		if st := s.Stats(); st.ServiceSeconds != want.Seconds() {
			t.Errorf("ServiceSeconds %v, want the sum of the draws %v", st.ServiceSeconds, want.Seconds())
		}
	})
}

// PeakInFlight counts the queue as well as the slots, and keeps the high
// mark after the requests are gone.
func TestMockPeakInFlightCountsQueuedAndInService(t *testing.T) {
	for _, slots := range []int{2, 0} { // 0: unlimited, nothing queues
		synctest.Test(t, func(t *testing.T) {
			s := newServer(t, Config{Slots: slots, Median: time.Second})
			start := time.Now()
			var done []<-chan result
			for range 5 {
				done = append(done, serveAsync(s, newReq(t.Context(), PathChatCompletions, chatBody("m", "hi", 10, false)), start))
			}
			synctest.Wait()
			if st := s.Stats(); st.PeakInFlight != 5 || int64(st.QueueDepth+st.InService) != 5 {
				t.Fatalf("slots %d, 5 held: peak %d, queued %d + in service %d; want 5, 5", slots, st.PeakInFlight, st.QueueDepth, st.InService)
			}
			for _, ch := range done {
				<-ch
			}
			<-serveAsync(s, newReq(t.Context(), PathChatCompletions, chatBody("m", "hi", 10, false)), start)
			rec := (<-serveAsync(s, httptest.NewRequestWithContext(t.Context(), http.MethodGet, PathStats, nil), start)).rec
			if st := s.Stats(); st.PeakInFlight != 5 || st.QueueDepth+st.InService != 0 {
				t.Errorf("slots %d, all answered: %+v, want peak 5 and nothing in flight", slots, st)
			}
			if got := num(t, decode(t, rec.Body), "peak_in_flight"); got != 5 {
				t.Errorf("slots %d: GET %s peak_in_flight %d, want 5", slots, PathStats, got)
			}
		})
	}
}

// Requests turned away, and requests held by a hang fault or a hang
// outage, never reach capacity: while one request is in service and all of
// them are tried, the peak stays 1.
func TestMockPeakInFlightLeavesOutRefusals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, Config{Slots: 1, Mode: Mode429, Median: time.Second,
			Models: map[string]ModelSpec{"limited": {RPM: 1}, DefaultModelKey: {}}})
		start := time.Now()
		body := chatBody("m", "hi", 10, false)
		running := serveAsync(s, newReq(t.Context(), PathChatCompletions, body), start)
		hangCtx, endHang := context.WithCancel(t.Context())
		hanging := serveAsync(s, newReq(hangCtx, PathChatCompletions, body, HeaderFault, "hang"), start)
		synctest.Wait()
		if err := s.SetOutage(OutageHang); err != nil {
			t.Fatal(err)
		}
		held := serveAsync(s, newReq(t.Context(), PathChatCompletions, body), start)
		synctest.Wait()
		if st := s.Stats(); st.InService != 1 || st.Hanging != 1 || st.Outage != 1 || st.PeakInFlight != 1 {
			t.Fatalf("one in service, one hanging, one held by the outage: %+v, want peak 1", st)
		}
		if err := s.SetOutage(OutageOff); err != nil {
			t.Fatal(err)
		}
		<-held

		gone, cancel := context.WithCancel(t.Context())
		cancel()
		for _, r := range []*http.Request{
			newReq(t.Context(), PathChatCompletions, "{not json"),
			newReq(t.Context(), PathChatCompletions, body, HeaderFault, "error"),
			newReq(t.Context(), PathChatCompletions, body, HeaderFault, "429"),
			newReq(t.Context(), PathChatCompletions, body),                                 // every slot busy
			newReq(t.Context(), PathChatCompletions, chatBody("limited", "hi", 10, false)), // takes the RPM, then no slot
			newReq(t.Context(), PathChatCompletions, chatBody("limited", "hi", 10, false)), // over the RPM
			newReq(gone, PathChatCompletions, body),                                        // left before the queue
		} {
			<-serveAsync(s, r, start)
		}
		st := s.Stats()
		if st.BadRequests != 1 || st.Faults.Error != 1 || st.Faults.RateLimit != 1 || st.Rejected429 != 2 ||
			st.RateLimited != 1 || st.Abandoned != 1 || st.Started != 1 {
			t.Fatalf("stats %+v: not every refusal happened", st)
		}
		if st.PeakInFlight != 1 {
			t.Errorf("PeakInFlight %d, want 1: only the request in service was accepted", st.PeakInFlight)
		}
		endHang()
		<-hanging
		<-running
	})
}
