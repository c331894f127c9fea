// Package loopback serves an http.Handler on a free loopback port, for the
// programs that assemble sluice's real pieces (mock provider, gateway, load
// generator) in one process: the demo and the simulator's calibration.
package loopback

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Serve runs h on 127.0.0.1 at a free port and returns its base URL and a
// stop function. stop waits up to grace for requests in progress to finish
// (zero: it closes their connections at once), and returns once the server
// has stopped; calling it more than once is harmless.
func Serve(h http.Handler, grace time.Duration) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Default().Error("loopback: serving", "addr", ln.Addr().String(), "err", err)
		}
	}()
	stop = func() {
		if grace > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), grace)
			defer cancel()
			if srv.Shutdown(ctx) == nil {
				<-done
				return
			}
		}
		_ = srv.Close()
		<-done
	}
	return "http://" + ln.Addr().String(), stop, nil
}
