package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const upstreamsYAML = `upstreams:
  - name: east
    url: http://127.0.0.1:9001
    concurrency: 16
    models:
      - name: gpt-4o
        aliases: [gpt-4o-2024-08-06]
        concurrency: 8
        rpm: 500
        tpm: 30000
  - name: west
    url: http://127.0.0.1:9002
    concurrency: 4
    models: [{name: gpt-4o}, {name: gpt-4o-mini}]
routes: {gpt-4o: [west, east]}
degrade: {ladder: {gpt-4o: gpt-4o-mini}, classes: [batch]}
batch: {disabled: true}
`

// TestCheckConfigPrintsPools: with upstreams, check-config prints each
// pool's concurrency and limits, the routes and the ladder.
func TestCheckConfigPrintsPools(t *testing.T) {
	file := filepath.Join(t.TempDir(), "up.yaml")
	if err := os.WriteFile(file, []byte(upstreamsYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runCheckConfig(context.Background(), []string{file}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{
		": ok\n",
		"east/gpt-4o       openai   8            ",
		"500  30000",
		"west/gpt-4o-mini  openai   4",
		"gpt-4o → west/gpt-4o, east/gpt-4o",
		"gpt-4o-2024-08-06 → east/gpt-4o",
		"gpt-4o → gpt-4o-mini",
		"classes degraded without asking: batch",
		"derived per pool",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("check-config output lacks %q:\n%s", want, s)
		}
	}
}

// TestServeUpstreamFlagConflictsWithUpstreams: --upstream (and the other
// single-upstream flags) with a config that has upstreams is an error
// naming both.
func TestServeUpstreamFlagConflictsWithUpstreams(t *testing.T) {
	file := filepath.Join(t.TempDir(), "up.yaml")
	if err := os.WriteFile(file, []byte(upstreamsYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--upstream", "http://127.0.0.1:1"}, []string{"--upstream", "upstreams:"}},
		{[]string{"--concurrency", "3"}, []string{"--concurrency", "upstreams"}},
		{[]string{"--api-key-env", "K"}, []string{"--api-key-env", "upstreams"}},
	} {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		var f serveFlags
		f.register(fs)
		if err := fs.Parse(append([]string{"--config", file}, tc.args...)); err != nil {
			t.Fatal(err)
		}
		_, err := f.load(fs)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %v, want an error naming %s", tc.args, err, w)
			}
		}
	}
	// Without a conflicting flag the config loads.
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var f serveFlags
	f.register(fs)
	if err := fs.Parse([]string{"--config", file, "--listen", "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.load(fs); err != nil {
		t.Fatal(err)
	}
}
