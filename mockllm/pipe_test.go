package mockllm

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
)

// pipeNet runs a real net/http server and client over net.Pipe
// connections, so that a whole HTTP exchange, client disconnects included,
// can run inside a synctest bubble: loopback sockets are outside the bubble,
// in-memory pipes are not.
type pipeNet struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once

	srv    *http.Server
	served chan struct{}
	client *http.Client
	tr     *http.Transport
}

// newPipeNet serves h and returns a client whose requests reach it; any
// URL host works. It must be called inside the bubble; cleanup is
// registered with t.
func newPipeNet(t *testing.T, h http.Handler) *pipeNet {
	p := &pipeNet{
		conns:  make(chan net.Conn),
		closed: make(chan struct{}),
		srv:    &http.Server{Handler: h},
		served: make(chan struct{}),
	}
	p.tr = &http.Transport{DialContext: p.dial, DisableCompression: true}
	p.client = &http.Client{Transport: p.tr}
	go func() {
		defer close(p.served)
		_ = p.srv.Serve(p)
	}()
	t.Cleanup(p.shutdown)
	return p
}

func (p *pipeNet) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case p.conns <- server:
		return client, nil
	case <-p.closed:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// shutdown closes every connection and waits for the server to stop, so
// that no goroutine outlives the bubble.
func (p *pipeNet) shutdown() {
	p.tr.CloseIdleConnections()
	_ = p.srv.Close()
	<-p.served
}

// Accept, Close and Addr make pipeNet the server's net.Listener.
func (p *pipeNet) Accept() (net.Conn, error) {
	select {
	case c := <-p.conns:
		return c, nil
	case <-p.closed:
		return nil, errors.New("pipe listener closed")
	}
}

func (p *pipeNet) Close() error {
	p.once.Do(func() { close(p.closed) })
	return nil
}

func (p *pipeNet) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }
