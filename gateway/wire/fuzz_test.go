package wire

import (
	"testing"

	"github.com/sluicehq/sluice/contract"
)

// FuzzUsageMeter runs its seeds (f.Add and testdata/fuzz/) as part of go
// test; .ci/run fuzzes it for a few seconds. It asserts what must hold for
// any body, not merely that nothing panics.
func FuzzUsageMeter(f *testing.F) {
	f.Add(false, []byte(`{"usage":{"prompt_tokens":10,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":2}}}`), uint16(7))
	f.Add(false, []byte(`{"usage":{"input_tokens":10,"output_tokens":5,"input_tokens_details":{"cached_tokens":3}}}`), uint16(0))
	f.Add(true, []byte("data: {\"choices\":[]}\n\ndata: {\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\ndata: [DONE]\n\n"), uint16(20))
	f.Add(true, []byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":9,\"cache_read_input_tokens\":4,\"output_tokens\":1}}}\r\n\r\nevent: message_delta\ndata: {\"usage\":{\"output_tokens\":12}}\n\n"), uint16(33))
	f.Add(true, []byte("data: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":1,\"output_tokens\":2}}}\n"), uint16(5))
	f.Add(false, []byte(`{"usage":{"prompt_tokens":-1,"prompt_tokens_details":{"cached_tokens":-5}}}`), uint16(1))
	f.Add(true, []byte("data: {\"usage\":{\"input_tokens\":9223372036854775807,\"cache_read_input_tokens\":9223372036854775807}}\n"), uint16(1))
	f.Fuzz(func(t *testing.T, sse bool, body []byte, split uint16) {
		ct := "application/json"
		if sse {
			ct = "text/event-stream; charset=utf-8"
		}
		whole := NewUsageMeter(ct)
		whole.Feed(body)
		u1, ok1 := whole.Done()
		// The same body in two pieces, cut anywhere, reads the same.
		cut := int(split) % (len(body) + 1)
		parts := NewUsageMeter(ct)
		parts.Feed(body[:cut])
		parts.Feed(body[cut:])
		u2, ok2 := parts.Done()
		if u1 != u2 || ok1 != ok2 {
			t.Fatalf("%q cut at %d: %+v %v, whole %+v %v", body, cut, u2, ok2, u1, ok1)
		}
		if u1.Input < 0 || u1.Output < 0 || u1.CachedInput < 0 || u1.CachedInput > u1.Input {
			t.Fatalf("%q: usage %+v: negative, or more cached than input", body, u1)
		}
		if !ok1 && u1 != (contract.Usage{}) {
			t.Fatalf("%q: usage %+v reported as not found", body, u1)
		}
	})
}
