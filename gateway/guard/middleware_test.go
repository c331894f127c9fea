package guard

import (
	"net/http"
	"testing"
	"time"
)

// TestBodyTimeoutFitsTheBody: with read_body_timeout derived, a body's
// deadline follows the size it may have, so a 99 MB upload at 2 MB/s ends
// in time while a body trickling a byte a second is still cut; set, it is
// one deadline for every body.
func TestBodyTimeoutFitsTheBody(t *testing.T) {
	const upload = 100<<20 + 1<<20 // batch.max_file_bytes plus the form, at their defaults
	maxBody := func(r *http.Request) int64 {
		if r.URL.Path == "/v1/files" {
			return upload
		}
		return 10 << 20
	}
	derived, err := Config{}.effective(10<<20, 1024)
	if err != nil {
		t.Fatal(err)
	}
	set, err := Config{ReadBodyTimeout: Duration(30 * time.Second)}.effective(10<<20, 1024)
	if err != nil {
		t.Fatal(err)
	}
	req := func(path string, length int64) *http.Request {
		r, _ := http.NewRequest(http.MethodPost, "http://x"+path, http.NoBody)
		r.ContentLength = length // -1: chunked
		return r
	}
	for _, c := range []struct {
		name            string
		l               Limits
		r               *http.Request
		atLeast, atMost time.Duration
	}{
		// 99 MB at 2 MB/s takes 49.5s.
		{"99 MB upload", derived, req("/v1/files", 99e6), 60 * time.Second, 110 * time.Second},
		{"chunked upload", derived, req("/v1/files", -1), 110 * time.Second, 112 * time.Second},
		{"declared over the limit", derived, req("/v1/files", 200e6), 110 * time.Second, 112 * time.Second},
		// A kilobyte at a byte a second takes 1,000s.
		{"small call", derived, req("/v1/chat/completions", 1000), 10 * time.Second, 11 * time.Second},
		{"chunked call", derived, req("/v1/chat/completions", -1), 20 * time.Second, 20 * time.Second},
		{"set: upload", set, req("/v1/files", 99e6), 30 * time.Second, 30 * time.Second},
		{"set: call", set, req("/v1/chat/completions", 1000), 30 * time.Second, 30 * time.Second},
	} {
		got := c.l.bodyTimeout(c.r, maxBody)
		if got < c.atLeast || got > c.atMost {
			t.Errorf("%s: %v, want %v..%v", c.name, got, c.atLeast, c.atMost)
		}
	}
	if got := derived.bodyTimeout(req("/v1/files", 99e6), nil); got != 20*time.Second {
		t.Errorf("no maxBody: %v, want the flat 20s", got)
	}
	if got := BodyTimeout(1 << 40); got != time.Hour {
		t.Errorf("BodyTimeout(1 TiB) = %v, want the 1h ceiling", got)
	}
}
