package observe

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/contract"
)

var hexID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// TestRequestID pins which ids are taken from the caller.
func TestRequestID(t *testing.T) {
	for _, tc := range []struct {
		name string
		vs   []string
		keep bool
	}{
		{"uuid", []string{"3f2b8c1e-4a5d-4e6f-9a7b-1c2d3e4f5a6b"}, true},
		{"token", []string{"req_abc/DEF:1=2"}, true},
		{"at the limit", []string{strings.Repeat("a", MaxRequestID)}, true},
		{"absent", nil, false},
		{"empty", []string{""}, false},
		{"too long", []string{strings.Repeat("a", MaxRequestID+1)}, false},
		{"space", []string{"a b"}, false},
		{"newline", []string{"a\nlevel=ERROR"}, false},
		{"quote", []string{"a\"b"}, true}, // visible: quoted by the handlers
		{"control", []string{"a\x00"}, false},
		{"not ascii", []string{"ид"}, false},
		{"twice", []string{"a", "b"}, false},
	} {
		h := http.Header{}
		if tc.vs != nil {
			h[contract.HeaderRequestID] = tc.vs
		}
		id, kept := RequestID(h)
		switch {
		case kept != tc.keep:
			t.Errorf("%s: kept %v, want %v", tc.name, kept, tc.keep)
		case kept && id != tc.vs[0]:
			t.Errorf("%s: id %q, want the caller's", tc.name, id)
		case !kept && !hexID.MatchString(id):
			t.Errorf("%s: made up %q, want 32 hex digits", tc.name, id)
		}
	}
	if a, b := NewRequestID(), NewRequestID(); a == b {
		t.Errorf("two new ids are both %s", a)
	}
}

// TestMoveUpstreamID: the provider's X-Request-Id leaves X-Request-Id
// for X-Sluice-Upstream-Request-Id when it is one sane token, and is
// dropped otherwise.
func TestMoveUpstreamID(t *testing.T) {
	for _, tc := range []struct {
		name   string
		vs     []string
		id     string
		stamps bool
	}{
		{"none", nil, "", false},
		{"sane", []string{"req_42"}, "req_42", true},
		{"twice", []string{"a", "b"}, "", false},
		{"newline", []string{"a\nb"}, "", false},
	} {
		h := http.Header{}
		if tc.vs != nil {
			h[contract.HeaderRequestID] = tc.vs
		}
		id, ok := MoveUpstreamID(h)
		if id != tc.id || ok != tc.stamps {
			t.Errorf("%s: %q %v, want %q %v", tc.name, id, ok, tc.id, tc.stamps)
		}
		if _, left := h[contract.HeaderRequestID]; left {
			t.Errorf("%s: %s left in the header", tc.name, contract.HeaderRequestID)
		}
		if got := h.Get(contract.HeaderUpstreamRequestID); got != tc.id {
			t.Errorf("%s: %s = %q, want %q", tc.name, contract.HeaderUpstreamRequestID, got, tc.id)
		}
	}
}
