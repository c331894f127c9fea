package chain

import (
	"testing"

	"github.com/sluicehq/sluice/spend"
)

func TestGateCost(t *testing.T) {
	for _, tt := range []struct {
		name string
		r    Request
		want float64
	}{
		{"set by the shell", Request{Cost: 7, InputTokens: 100, MaxOutputTokens: 100}, 7},
		{"prompt plus max_tokens", Request{InputTokens: 1000, MaxOutputTokens: 256}, 1256},
		{"max_tokens unknown", Request{InputTokens: 1000}, 1000 + spend.DefaultOutputTokens},
		{"nothing known", Request{}, spend.DefaultOutputTokens},
		{"a negative size is none", Request{InputTokens: -5, MaxOutputTokens: 10}, 10},
	} {
		if got := tt.r.GateCost(); got != tt.want {
			t.Errorf("%s: GateCost %v, want %v", tt.name, got, tt.want)
		}
		if got := tt.r.admission().Cost; got != tt.want {
			t.Errorf("%s: the gate is given cost %v, want %v", tt.name, got, tt.want)
		}
	}
}
