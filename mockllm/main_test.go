package mockllm

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test must leave no goroutine behind: Close, httptest.Server.Close
// and the pipe network's shutdown are what end them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
