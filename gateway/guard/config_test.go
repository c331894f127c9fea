package guard

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestLimitsDefaults: every zero of the section resolves to what it
// documents, the connection cap derived from the descriptor limit.
func TestLimitsDefaults(t *testing.T) {
	l, err := Config{}.effective(10<<20, 1024)
	if err != nil {
		t.Fatal(err)
	}
	want := Limits{ReadHeader: 10 * time.Second, ReadBody: 20 * time.Second, ReadBodyPerRequest: true, Idle: time.Minute, Write: time.Minute,
		MaxConns: 480, MaxUnauthPerIP: 60, FDLimit: 1024}
	if !reflect.DeepEqual(l, want) {
		t.Errorf("defaults at 1024 descriptors: %+v, want %+v", l, want)
	}
	if l, _ := (Config{}).effective(10<<20, 1<<20); l.MaxConns != 1<<16 {
		t.Errorf("derived cap at 2^20 descriptors: %d, want 65536", l.MaxConns)
	}
	for _, fds := range []uint64{0, 50} {
		if _, err := (Config{}).effective(10<<20, fds); err == nil || !strings.Contains(err.Error(), "server.max_connections") {
			t.Errorf("%d descriptors: %v, want an error naming server.max_connections", fds, err)
		}
	}
	if l, err := (Config{MaxConnections: 100}).effective(1<<20, 0); err != nil || l.MaxUnauthPerIP != 12 || l.ReadBody != 11*time.Second {
		t.Errorf("set cap, unknown descriptors: %+v %v", l, err)
	}
}
