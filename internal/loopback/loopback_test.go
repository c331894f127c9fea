package loopback

import (
	"io"
	"net/http"
	"testing"
	"time"
)

func TestServeAndStop(t *testing.T) {
	for _, grace := range []time.Duration{0, time.Second} {
		url, stop, err := Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "hello")
		}), grace)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "hello" {
			t.Fatalf("grace %v: got %q", grace, b)
		}
		stop()
		stop() // harmless
		if _, err := http.Get(url); err == nil {
			t.Fatalf("grace %v: still serving after stop", grace)
		}
	}
}
