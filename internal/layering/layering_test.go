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
// above. A name ending in "/..." stands for every package under it.
var layers = [][]string{
	// Helpers that import nothing of the project.
	{"internal/loghist", "internal/yamltime", "internal/loopback", "internal/layering"},
	// The wire contract: headers, reasons, error bodies.
	{"contract"},
	// The policies; batch, the durable job store and its executor.
	{"admission", "retrybudget", "batch"},
	{"spend"}, // prices and budgets in the gate's ranks and reasons
	// The admission chain, which runs the policies in order; the ledgers'
	// and the job stores' shared test suites.
	{"chain", "spend/spendtest", "batch/batchtest", "store", "store/redistest"},
	{"client"},
	// The shells and the tools around them: none imports another.
	{"gateway", "sim", "loadgen", "mockllm"},
	// Programs that assemble the shells.
	{"internal/demo", "internal/calibrate", "internal/simreport", "internal/fleet", "internal/promise"},
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
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to read the import graph: %v", err)
	}
	cmd := exec.Command(gobin, "list", "-e", "-json=ImportPath,Imports,Error", module+"/...")
	cmd.Dir = "../.." // the module's root, from this package's directory
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
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
	for _, p := range []string{"admission", "retrybudget", "spend", "chain", "gateway", "sim", "client", "loadgen", "mockllm"} {
		if _, ok := graph[p]; !ok {
			t.Errorf("package %s is missing from the module's import graph", p)
		}
	}
}

// TestViolationsNameTheEdge pins the checker itself on a graph with the
// edges it must refuse.
func TestViolationsNameTheEdge(t *testing.T) {
	graph := map[string][]string{
		"gateway":     {"chain", "sim"},         // one shell into the other
		"chain":       {"admission", "gateway"}, // the chain into a shell
		"loadgen":     {"client", "gateway"},
		"contract":    {},
		"admission":   {"contract"},
		"spend":       {"admission"},
		"cmd/sluice":  {"gateway", "sim"},
		"newthing":    {},
		"sim":         {"chain"},
		"client":      {"retrybudget"},
		"retrybudget": {},
	}
	want := []string{
		"chain imports gateway, a layer above it (gateway, sim, loadgen, mockllm)",
		"gateway imports sim, of its own layer (gateway, sim, loadgen, mockllm)",
		"loadgen imports gateway, of its own layer (gateway, sim, loadgen, mockllm)",
		"package newthing has no layer: add it to layers in internal/layering",
	}
	if got := violations(graph); !slices.Equal(got, want) {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
