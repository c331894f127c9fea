package contract

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestRetryAfterRoundsUpToAtLeastOne(t *testing.T) {
	for _, tc := range []struct {
		d     time.Duration
		s, ms int64
	}{
		{0, 1, 1},
		{-time.Second, 1, 1},
		{time.Microsecond, 1, 1},
		{1500 * time.Microsecond, 1, 2},
		{time.Second, 1, 1000},
		{1001 * time.Millisecond, 2, 1001},
	} {
		if s, ms := RetryAfterSeconds(tc.d), RetryAfterMs(tc.d); s != tc.s || ms != tc.ms {
			t.Errorf("%v: %d s, %d ms; want %d, %d", tc.d, s, ms, tc.s, tc.ms)
		}
	}
}

func TestEchoBoundsWhatItRepeats(t *testing.T) {
	if got := Echo("short"); got != `"short"` {
		t.Errorf("Echo(short) = %s", got)
	}
	long := strings.Repeat("é", 100) // 200 bytes, two per rune
	got := Echo(long)
	if !strings.HasSuffix(got, "… (200 bytes)") || len(got) > MaxEcho+30 || !utf8.ValidString(got) {
		t.Errorf("Echo(200 bytes) = %s", got)
	}
}
