// Command bareproxy is the floor of scripts/overhead.sh and
// scripts/streams.sh: a bare httputil.ReverseProxy with the idle pool of
// `sluice serve`, net/http's default buffers and a 32 KiB copy buffer
// pool, and nothing of sluice — no gate, no body parsing, no metrics. The difference
// between it and calling the provider directly is what the design (Go's
// net/http server and client, one more hop on loopback) costs before sluice
// does anything; the difference between it and `sluice serve` is sluice's
// own work.
//
//	go run ./scripts/bareproxy --upstream http://127.0.0.1:8081 --listen 127.0.0.1:8082
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"sync"
)

// pool recycles the proxy's copy buffers, as sluice does: without one,
// ReverseProxy allocates 32 KiB per response.
type pool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (pool) Get() []byte  { return *buffers.Get().(*[]byte) }
func (pool) Put(b []byte) { buffers.Put(&b) }

func main() {
	upstream := flag.String("upstream", "", "the provider's base URL (required)")
	listen := flag.String("listen", "127.0.0.1:8082", "address to serve on")
	idle := flag.Int("max-idle-conns", 1024, "idle connections kept to the upstream, as upstream.max_idle_conns")
	flag.Parse()
	u, err := url.Parse(*upstream)
	if err != nil || u.Scheme == "" || u.Host == "" {
		fmt.Fprintf(os.Stderr, "bareproxy: --upstream: want an absolute URL, got %q\n", *upstream)
		os.Exit(2)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = *idle, *idle
	proxy := &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.Out.Host = u.Host },
		Transport:  tr,
		BufferPool: pool{},
	}
	log.Fatal(http.ListenAndServe(*listen, proxy))
}
