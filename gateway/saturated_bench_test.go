package gateway

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/gateway/saturation"
	"github.com/sluicehq/sluice/mockllm"
)

// BenchmarkShedCall is what a call shed on a saturated CPU costs the
// handler against one proxied (to the mock, in memory), in the same run:
// shedding relieves the CPU by the difference. go test -run '^$' -bench
// ShedCall -benchmem ./gateway/
func BenchmarkShedCall(b *testing.B) {
	for _, shed := range []bool{false, true} {
		name := "proxied"
		if shed {
			name = "shed"
		}
		b.Run(name, func(b *testing.B) {
			mock, err := mockllm.New(mockllm.Config{})
			if err != nil {
				b.Fatal(err)
			}
			cfg := config.Config{Upstream: config.UpstreamConfig{URL: "http://provider.invalid"}, Admission: config.AdmissionConfig{Concurrency: 64, MaxQueue: new(64)}}
			g, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Transport: handlerTransport{mock}})
			if err != nil {
				b.Fatal(err)
			}
			want := http.StatusOK
			if shed {
				// Every rank shed: the floor of the admitted fraction,
				// with no arrivals to spread it by, sheds 95% of every
				// rank; the 5% let through are proxied.
				rank, _ := g.chain.Rank(admission.Request{})
				for range 200 {
					g.cpu.shedder.Observe(saturation.Window{Delay: time.Second, Busy: 1, Calls: 1 << 20})
				}
				for range 100 {
					g.cpu.shedder.Shed(rank)
				}
				g.cpu.shedder.Observe(saturation.Window{Delay: time.Second, Busy: 1, Calls: 1 << 20})
				want = http.StatusServiceUnavailable
			}
			b.ReportAllocs()
			cpu := cpuNanos()
			n := 0
			for b.Loop() {
				r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(chatBody))
				r.Header.Set("Content-Type", "application/json")
				w := httptest.NewRecorder()
				g.ServeHTTP(w, r)
				if w.Code == want {
					n++
				}
			}
			if n < b.N*9/10 {
				b.Fatalf("%d of %d answered %d", n, b.N, want)
			}
			if cpu > 0 {
				b.ReportMetric(float64(cpuNanos()-cpu)/float64(b.N), "cpu-ns/op")
			}
		})
	}
}
