package testkit

import (
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/mockllm"
)

// StartMock runs the mock provider built from cfg on a loopback httptest
// server until the end of the test, and returns both: the server's URL is
// the gateway's upstream, and the mock tells the test what the provider
// saw. An invalid cfg fails the test.
//
// At cleanup the mock closes before the server: the mock's Close ends what
// is in flight (a stream, a queued or hanging request), and the server's
// Close waits for every handler to return, so that the other order would
// wait out a stream or a hang.
func StartMock(t testing.TB, cfg mockllm.Config) (*mockllm.Server, *httptest.Server) {
	t.Helper()
	m, err := mockllm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m)
	t.Cleanup(func() {
		m.Close()
		srv.Close()
	})
	return m, srv
}
