package layering

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/sluicehq/sluice"

// layers are the module's packages from the bottom up: a package may
// import packages of lower layers only, never one of its own layer or
// above. A name ending in "/..." stands for every package under it; a
// package belongs to the lowest layer that names it, so that the
// programs under cmd/sluice/internal sit below the rest of cmd.
var layers = [][]string{
	// Helpers that import nothing of the project; yamlpath decodes every
	// configuration and names the YAML path in its errors.
	{"internal/loghist", "internal/yamltime", "internal/yamlpath", "internal/loopback", "internal/layering"},
	// The wire contract: headers, reasons, error bodies.
	{"contract"},
	// gateway/saturation, the shedding on the gateway's own saturated
	// CPU: below gateway/guard, whose server: section holds its config.
	{"gateway/saturation"},
	// The policies, none of which imports another: admission; retry
	// budgets; lease, the division of a cluster's concurrency among its
	// replicas, in Go without Redis so that the simulator runs it too;
	// batch, the durable job store and its executor; gateway/guard, the
	// API listener's connection caps and timeouts; adaptive, the
	// concurrency learnt from the provider's latencies; workload, traffic
	// shaped like production's (traces, a provider's time by tokens, the
	// offline schedule the production scenarios are measured against).
	{"admission", "retrybudget", "lease", "batch", "gateway/guard", "adaptive", "workload"},
	{"spend"}, // prices and budgets in the gate's ranks and reasons
	// The admission chain, which runs the policies in order; store, their
	// Redis side (the ledger, the lease table, the job store); the tests
	// every ledger, job store and lease table shares.
	{"chain", "spend/spendtest", "batch/batchtest", "lease/leasetest", "store", "store/redistest"},
	// Above the chain, none importing another: client, the callers'
	// retry discipline; sim/scenario, the simulator's scenario file,
	// whose sections are the chain's and the policies' configurations.
	{"client", "sim/scenario"},
	// gateway/wire, the providers' and callers' wire formats (error
	// bodies in both API shapes, refusals, usage, rate-limit headers):
	// below the rooms, so that each answers an error as the gateway does.
	{"gateway/wire"},
	// The gateway's rooms, which it assembles, none of which imports
	// another: gateway/batchapi, the Batch API and the Doer of its items;
	// gateway/dashboard, the admin dashboard's page, history and events;
	// gateway/idempotency, the Idempotency-Key's store of answers;
	// gateway/observe, the access log and the spans.
	{"gateway/batchapi", "gateway/idempotency", "gateway/dashboard", "gateway/observe"},
	// The configuration file: its schema, defaults and validation, and
	// the chain's configuration it describes, one loader for the gateway
	// and `sluice check-config`. Each section's type is its package's own
	// (the policies', the store's, the rooms'); this assembles them.
	{"config"},
	// The replicas' wiring: where the spend books live and each replica's
	// lease of the provider's concurrency, opened from the store section
	// (package config's StoreConfig) — a room of the gateway's, but above
	// config, since it reads its schema, where the rooms below config
	// bring their own sections to it.
	{"gateway/cluster"},
	// The shells and the tools around them: none imports another.
	{"gateway", "sim", "loadgen", "mockllm"},
	// internal/testkit, what the tests share: above mockllm, whose mock
	// provider it serves on loopback. Only tests import it, and tests are
	// left out of the graph, so that a test of any layer may.
	{"internal/testkit"},
	// Programs that assemble the shells: the binary's commands (demo,
	// the simulator's report and calibration, promise) and the replicas'
	// test harness (fleet). None imports another, and Go's internal rule
	// keeps every package outside cmd/sluice from importing them.
	{"cmd/sluice/internal/..."},
	// The binary, a thin main over the packages above, and the other
	// programs.
	{"cmd/...", "scripts/...", "tools/...", "examples/..."},
}

// layerOf returns the layer of a package of the module (its path inside
// the module), and false when the table has none for it.
func layerOf(rel string) (int, bool) {
	for i, l := range layers {
		for _, p := range l {
			if p == rel {
				return i, true
			}
			if dir, ok := strings.CutSuffix(p, "/..."); ok && (rel == dir || strings.HasPrefix(rel, dir+"/")) {
				return i, true
			}
		}
	}
	return 0, false
}

// violations lists what breaks the layering in graph (a package's path
// inside the module → the paths inside the module it imports): a package
// without a layer, and every import of a package of the same layer or
// above, naming both ends.
func violations(graph map[string][]string) []string {
	var out []string
	pkgs := make([]string, 0, len(graph))
	for p := range graph {
		pkgs = append(pkgs, p)
	}
	slices.Sort(pkgs)
	for _, from := range pkgs {
		lf, ok := layerOf(from)
		if !ok {
			out = append(out, fmt.Sprintf("package %s has no layer: add it to layers in internal/layering", from))
			continue
		}
		for _, to := range graph[from] {
			lt, ok := layerOf(to)
			if !ok {
				continue // reported as a package of its own
			}
			switch {
			case lt > lf:
				out = append(out, fmt.Sprintf("%s imports %s, a layer above it (%s)", from, to, strings.Join(layers[lt], ", ")))
			case lt == lf:
				out = append(out, fmt.Sprintf("%s imports %s, of its own layer (%s)", from, to, strings.Join(layers[lt], ", ")))
			}
		}
	}
	return out
}

// imports reads the module's import graph with go list: each package's
// own imports, its tests' left out (a test may assemble what its package
// may not, as the simulator's test of the gateway does).
func imports(t *testing.T) map[string][]string {
	t.Helper()
	out := goList(t, "-e", "-json=ImportPath,Imports,Error", module+"/...")
	graph := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
			Error      *struct{ Err string }
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.Error != nil {
			t.Fatalf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		rel, ok := inModule(p.ImportPath)
		if !ok {
			continue
		}
		graph[rel] = []string{}
		for _, imp := range p.Imports {
			if r, ok := inModule(imp); ok {
				graph[rel] = append(graph[rel], r)
			}
		}
	}
	if len(graph) == 0 {
		t.Fatal("go list found no package of the module")
	}
	return graph
}

// goList runs go list with args in the module's root and returns its
// output.
func goList(t *testing.T, args ...string) []byte {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to read the import graph: %v", err)
	}
	cmd := exec.Command(gobin, append([]string{"list"}, args...)...)
	cmd.Dir = "../.." // the module's root, from this package's directory
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	return out
}

func inModule(importPath string) (string, bool) {
	rel, ok := strings.CutPrefix(importPath, module+"/")
	return path.Clean(rel), ok
}

func TestImportsReadTopDown(t *testing.T) {
	graph := imports(t)
	for _, v := range violations(graph) {
		t.Error(v)
	}
	// The packages the layering is about must be there to be checked;
	// contract is checked when present.
	for _, p := range []string{"admission", "retrybudget", "lease", "spend", "chain", "store", "config", "gateway", "sim", "sim/scenario", "client", "loadgen", "mockllm"} {
		if _, ok := graph[p]; !ok {
			t.Errorf("package %s is missing from the module's import graph", p)
		}
	}
}

// TestSimulatorWithoutRedis: the simulator runs the lease table's
// division in Go (package lease), not the store's Redis side, so that
// importing it does not import a Redis client.
func TestSimulatorWithoutRedis(t *testing.T) {
	for _, p := range []string{"sim", "lease"} {
		for dep := range strings.FieldsSeq(string(goList(t, "-deps", module+"/"+p))) {
			if strings.HasPrefix(dep, "github.com/redis/") {
				t.Errorf("%s depends on %s", p, dep)
			}
		}
	}
}

// TestViolationsNameTheEdge pins the checker itself on a graph with the
// edges it must refuse.
func TestViolationsNameTheEdge(t *testing.T) {
	graph := map[string][]string{
		"gateway":                  {"chain", "sim"},         // one shell into the other
		"chain":                    {"admission", "gateway"}, // the chain into a shell
		"loadgen":                  {"client", "gateway"},
		"contract":                 {},
		"admission":                {"contract"},
		"spend":                    {"admission"},
		"lease":                    {"store"}, // the division into its Redis side
		"store":                    {"spend", "lease"},
		"cmd/sluice":               {"gateway", "sim", "cmd/sluice/internal/demo"},
		"cmd/sluice/internal/demo": {"gateway", "cmd/sluice"}, // a program into the binary
		"newthing":                 {},
		"sim":                      {"chain", "lease"},
		"client":                   {"retrybudget"},
		"retrybudget":              {},
	}
	want := []string{
		"chain imports gateway, a layer above it (gateway, sim, loadgen, mockllm)",
		"cmd/sluice/internal/demo imports cmd/sluice, a layer above it (cmd/..., scripts/..., tools/..., examples/...)",
		"gateway imports sim, of its own layer (gateway, sim, loadgen, mockllm)",
		"lease imports store, a layer above it (chain, spend/spendtest, batch/batchtest, lease/leasetest, store, store/redistest)",
		"loadgen imports gateway, of its own layer (gateway, sim, loadgen, mockllm)",
		"package newthing has no layer: add it to layers in internal/layering",
	}
	if got := violations(graph); !slices.Equal(got, want) {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
