package guard

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// emfileListener fails Accept with EMFILE a number of times, then hands out
// one end of a pipe: a process out of descriptors, then relieved.
type emfileListener struct {
	fails   int
	accepts int
	closed  chan struct{}
}

func (l *emfileListener) Accept() (net.Conn, error) {
	l.accepts++
	if l.accepts <= l.fails {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	select {
	case <-l.closed:
		return nil, net.ErrClosed
	default:
	}
	c, _ := net.Pipe()
	return c, nil
}
func (l *emfileListener) Close() error   { close(l.closed); return nil }
func (l *emfileListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// TestAcceptBacksOffWhenOutOfDescriptors: EMFILE from accept is retried
// after a doubling pause (5ms, 10ms, … 1s), not in a hot loop, and a
// listener closed during a pause returns at once.
func TestAcceptBacksOffWhenOutOfDescriptors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner := &emfileListener{fails: 10, closed: make(chan struct{})}
		l := newListener(inner, Limits{MaxConns: 10, MaxUnauthPerIP: 10, Write: time.Second},
			slog.New(slog.NewTextHandler(io.Discard, nil)), newMetrics(prometheus.NewRegistry()))
		start := time.Now()
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		// 5+10+20+…+640ms, then 1s twice.
		want := 1275*time.Millisecond + 2*time.Second
		if took := time.Since(start); took != want || inner.accepts != 11 {
			t.Errorf("%d accepts over %v, want 11 over %v", inner.accepts, took, want)
		}
		if got := testutil.ToFloat64(l.metrics.refused.WithLabelValues("out_of_descriptors")); got != 10 {
			t.Errorf("out_of_descriptors = %v, want 10", got)
		}

		inner.fails, inner.accepts = 1<<30, 0
		done := make(chan error, 1)
		go func() { _, err := l.Accept(); done <- err }()
		synctest.Wait()
		l.Close()
		if err := <-done; !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
		}
	})
}

// TestWriteStallTimeoutIsPerWrite: a client that keeps reading, however
// slowly and for however long, is written to; one that stops reading is
// let go after write_timeout. A deadline for the whole response would cut
// the first; no deadline would keep the second for ever.
func TestWriteStallTimeoutIsPerWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		server, client := net.Pipe()
		defer client.Close()
		l := newListener(&emfileListener{closed: make(chan struct{})}, Limits{MaxConns: 1, MaxUnauthPerIP: 1, Write: 100 * time.Millisecond},
			slog.New(slog.NewTextHandler(io.Discard, nil)), newMetrics(prometheus.NewRegistry()))
		tc := l.admit(server)
		defer tc.Close()
		reading := make(chan struct{})
		go func() {
			defer close(reading)
			buf := make([]byte, 8)
			for range 20 { // one read every 80ms: 1.6s in all
				time.Sleep(80 * time.Millisecond)
				if _, err := io.ReadFull(client, buf); err != nil {
					return
				}
			}
		}()
		start := time.Now()
		for i := range 20 {
			if _, err := tc.Write([]byte("datadata")); err != nil {
				t.Fatalf("write %d, %v in, to a client reading steadily: %v", i, time.Since(start), err)
			}
		}
		<-reading
		start = time.Now()
		_, err := tc.Write([]byte("datadata"))
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() || time.Since(start) != 100*time.Millisecond {
			t.Errorf("write to a client that stopped reading: %v after %v, want a timeout after 100ms", err, time.Since(start))
		}
	})
}
