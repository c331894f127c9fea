package gateway

import (
	"strings"
	"testing"
)

func TestMissingProviderKeyIsAnError(t *testing.T) {
	cfg := baseConfig("http://127.0.0.1:1")
	cfg.Upstream.APIKeyEnv = "SLUICE_TEST_UNSET_VARIABLE"
	_, err := New(cfg, Options{Getenv: func(string) string { return "" }})
	if err == nil || !strings.Contains(err.Error(), "SLUICE_TEST_UNSET_VARIABLE") {
		t.Fatalf("err = %v", err)
	}
}
