package mockllm

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// These tests run the full HTTP stack over in-memory pipes inside a
// synctest bubble, so that arrival times and client disconnects are exact.

const pipeURL = "http://mock.test"

func TestStreamArrivesIncrementally(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, Config{Median: 1600 * time.Millisecond})
		p := newPipeNet(t, s)
		start := time.Now()
		resp := post(t, p.client, pipeURL+PathChatCompletions, chatBody("m", "hi", 16, true))
		defer resp.Body.Close()
		if got := time.Since(start); got != 0 {
			t.Errorf("headers after %v, want at once: the stream starts when service does", got)
		}
		br := bufio.NewReader(resp.Body)
		// 16 tokens in 16 pieces over 1.6s: piece i arrives at (i+1)×100ms,
		// while the response is still open.
		for i := range 16 {
			ev, ok := readEvent(br)
			if !ok {
				t.Fatalf("stream ended before piece %d", i)
			}
			if i == 0 {
				if !strings.Contains(ev.data, `"role":"assistant"`) {
					t.Errorf("first event %s, want the role chunk", ev.data)
				}
				if ev, ok = readEvent(br); !ok {
					t.Fatal("stream ended after the role chunk")
				}
			}
			if got, want := time.Since(start), time.Duration(i+1)*100*time.Millisecond; got != want {
				t.Errorf("piece %d arrived at %v, want %v", i, got, want)
			}
			if !strings.Contains(ev.data, `"content":"`) {
				t.Errorf("piece %d: %s", i, ev.data)
			}
			if i < 15 && s.Stats().InService != 1 {
				t.Errorf("piece %d arrived after the service ended", i)
			}
		}
		rest := readEvents(t, br)
		if len(rest) != 3 || rest[2].data != "[DONE]" || time.Since(start) != 1600*time.Millisecond {
			t.Errorf("tail %v at %v, want finish, usage, [DONE] at 1.6s", rest, time.Since(start))
		}
	})
}

func TestStreamsOfEveryAPIAreSpreadOverTheServiceTime(t *testing.T) {
	for _, tc := range []struct{ path, body string }{
		{PathCompletions, `{"model":"m","prompt":"hi","max_tokens":8,"stream":true}`},
		{PathResponses, `{"model":"m","input":"hi","max_output_tokens":8,"stream":true}`},
		{PathMessages, `{"model":"m","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		synctest.Test(t, func(t *testing.T) {
			s := newServer(t, Config{Median: 800 * time.Millisecond})
			p := newPipeNet(t, s)
			start := time.Now()
			resp := post(t, p.client, pipeURL+tc.path, tc.body)
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			if _, ok := readEvent(br); !ok || time.Since(start) != 100*time.Millisecond {
				t.Errorf("%s: first event at %v, want 100ms", tc.path, time.Since(start))
			}
			readEvents(t, br)
			if time.Since(start) != 800*time.Millisecond {
				t.Errorf("%s: stream ended at %v, want 800ms", tc.path, time.Since(start))
			}
		})
	}
}

// A client that hangs up mid-stream over a real connection: the provider
// notices nothing it cares about, finishes at 1s and bills the whole
// answer as wasted. With AbortOnDisconnect, it stops when the next piece
// finds the connection gone.
func TestHangUpMidStream(t *testing.T) {
	for _, abort := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			s := newServer(t, Config{Slots: 1, Median: time.Second, AbortOnDisconnect: abort})
			p := newPipeNet(t, s)
			start := time.Now()
			resp := post(t, p.client, pipeURL+PathChatCompletions, chatBody("m", "hi", 100, true))
			br := bufio.NewReader(resp.Body)
			readEvent(br)
			readEvent(br) // role chunk and first piece, at 1s/16
			resp.Body.Close()
			synctest.Wait()

			st := s.Stats()
			if abort {
				if st.Aborted != 1 || st.InService != 0 || time.Since(start) != time.Second/16 {
					t.Errorf("abort: %+v at %v, want aborted at once", st, time.Since(start))
				}
				if st.TokensOut != 6 { // 100 tokens × 62.5ms / 1s
					t.Errorf("abort: billed %d output tokens, want the 6 generated", st.TokensOut)
				}
				return
			}
			if st.InService != 1 || st.Wasted != 0 {
				t.Errorf("keep generating: %+v, want the slot still held", st)
			}
			time.Sleep(time.Second)
			synctest.Wait()
			if st := s.Stats(); st.Wasted != 1 || st.Delivered != 0 || st.InService != 0 || st.TokensOut != 100 {
				t.Errorf("keep generating: %+v, want 1 wasted, billed in full", st)
			}
		})
	}
}

// A non-streamed request whose client times out: the server learns it
// from the connection closing and counts the answer wasted when it is
// ready, or aborts at once with AbortOnDisconnect.
func TestClientTimeoutOverHTTP(t *testing.T) {
	for _, abort := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			s := newServer(t, Config{Median: time.Second, AbortOnDisconnect: abort})
			p := newPipeNet(t, s)
			ctx, cancel := context.WithTimeout(t.Context(), 250*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, pipeURL+PathChatCompletions,
				strings.NewReader(chatBody("gpt-4o", "hi", 40, false)))
			start := time.Now()
			_, err := p.client.Do(req)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("client error %v, want its deadline", err)
			}
			synctest.Wait()
			if abort {
				st := s.Stats()
				// gpt-4o serves in 1.5 × Median: 40 tokens × 250ms / 1.5s = 6.
				if st.Aborted != 1 || st.InService != 0 || st.TokensOut != 6 {
					t.Errorf("abort: %+v, want aborted at 250ms with 6 of 40 tokens billed", st)
				}
				return
			}
			time.Sleep(time.Until(start.Add(1500 * time.Millisecond))) // gpt-4o: 1.5 × Median
			synctest.Wait()
			st := s.Stats()
			want := BuiltinModels()["gpt-4o"].Cost(1, 40)
			if st.Wasted != 1 || st.WastedCostUSD != want || st.CostUSD != want {
				t.Errorf("keep generating: %+v, want 1 wasted costing %v", st, want)
			}
		})
	}
}

// Close mid-stream ends the stream with an error event the SDKs surface.
func TestCloseMidStreamSendsAnErrorEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := New(Config{Median: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		p := newPipeNet(t, s)
		resp := post(t, p.client, pipeURL+PathChatCompletions, chatBody("m", "hi", 4, true))
		defer resp.Body.Close()
		done := make(chan []sse)
		go func() { done <- readEvents(t, resp.Body) }()
		synctest.Wait()
		s.Close()
		evs := <-done
		if len(evs) != 1 || !strings.HasPrefix(evs[0].data, `{"error":`) {
			t.Errorf("events after Close: %v, want one error event", evs)
		}
		if _, err := io.ReadAll(resp.Body); err != nil {
			t.Errorf("body did not end cleanly: %v", err)
		}
		if st := s.Stats(); st.Aborted != 1 {
			t.Errorf("stats %+v, want 1 aborted", st)
		}
	})
}
