package mockllm

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestSlowdownOneModel: a slowdown set at run time lengthens the calls of
// its model only, "*" every model's, and factor 1 ends it; a bad factor is
// refused naming the field.
func TestSlowdownOneModel(t *testing.T) {
	s := newServer(t, Config{Median: 20e6, Slots: 0})
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	service := func(model string) string {
		t.Helper()
		resp := post(t, ts.Client(), ts.URL+PathChatCompletions, chatBody(model, "hi", 1, false))
		resp.Body.Close()
		return resp.Header.Get("X-Mock-Service-Ms")
	}
	admin := func(body string) int {
		t.Helper()
		resp, err := ts.Client().Post(ts.URL+PathSlowdown, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	slow, fast := "gpt-4.1", "gpt-4.1-mini" // factors 1.3 and 0.6: 26 ms and 12 ms
	if a, b := service(slow), service(fast); a != "26" || b != "12" {
		t.Fatalf("before: %s ms and %s ms, want 26 and 12", a, b)
	}
	if code := admin(`{"model":"gpt-4.1","factor":4}`); code != http.StatusOK {
		t.Fatalf("POST slowdown: %d", code)
	}
	if a, b := service(slow), service(fast); a != "104" || b != "12" {
		t.Fatalf("gpt-4.1 slowed ×4: %s ms and %s ms, want 104 and 12", a, b)
	}
	admin(`{"model":"*","factor":2}`)
	if a, b := service(slow), service(fast); a != "208" || b != "24" {
		t.Fatalf("every model ×2 more: %s ms and %s ms, want 208 and 24", a, b)
	}
	admin(`{"model":"gpt-4.1","factor":1}`)
	admin(`{"factor":1}`)
	if a := service(slow); a != "26" {
		t.Fatalf("after: %s ms, want 26", a)
	}
	for _, bad := range []string{`{"model":"x","factor":0}`, `{"model":"x"}`, `{"model":"x","factor":1e9}`, `{"speed":2}`} {
		if code := admin(bad); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", bad, code)
		}
	}
}
