package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/promise"
)

func init() {
	register("promise", "run the promise suite: the overload scenarios and their floors, in the simulator and over HTTP", runPromise)
}

func runPromise(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("promise", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sluice promise [--sim] [--http] [flags]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Runs the promise suite: every scenario (retry storms at 2x, 5x and 10x, a slowdown x4,")
		fmt.Fprintln(stderr, "mixed deadlines, a speculative flood, a runaway tenant, three replicas on Redis) with")
		fmt.Fprintln(stderr, "one prompt for every caller or each its own, attempts declared or not, in front of a")
		fmt.Fprintln(stderr, "provider of 16 slots (median 200ms), and checks each against its floors: goodput,")
		fmt.Fprintln(stderr, "waste, attempts left unanswered, time to a refusal, success per class. --sim runs the")
		fmt.Fprintln(stderr, "simulator (seconds); --http runs this binary as `sluice mock` and `sluice serve` with")
		fmt.Fprintln(stderr, "default flags on loopback (about 9s a cell). Exits 1 when a floor fails.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	var (
		simFlag  = fs.Bool("sim", true, "run the suite in the simulator")
		httpFlag = fs.Bool("http", false, "run the suite over real HTTP on loopback")
		names    = fs.String("scenario", "", "scenarios to run, comma-separated (default: all)")
		variants = fs.String("variant", "", "variants to run, comma-separated, e.g. one-prompt/declared (default: all four)")
		runs     = fs.Int("runs", 1, "runs of each cell, seeds seed..seed+runs-1; the table shows medians")
		seed     = fs.Uint64("seed", 1, "first seed")
		window   = fs.Duration("window", 6*time.Second, "over HTTP, how long each run sends arrivals")
		redis    = fs.String("redis", "", "host:port of a Redis for the replicas over HTTP (without it they are left out)")
		gateway  = fs.String("gateway-bin", "", "over HTTP, run `sluice serve` from this binary instead (a baseline: an older release against the same mock and load)")
		asJSON   = fs.Bool("json", false, "print every run's result as JSON")
		conc     = fs.Int("concurrency", promise.Slots, "the provider's concurrency the gateways are told; 0: none, they learn it as `sluice serve --upstream U` does (in the simulator too, as its policy learned; replicas are told it regardless: store.redis requires it)")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (all settings are flags)", fs.Arg(0))
	}
	if !*simFlag && !*httpFlag {
		return errors.New("--sim=false and no --http: nothing to run")
	}
	if *runs < 1 {
		return fmt.Errorf("--runs: must be at least 1, got %d", *runs)
	}
	if *conc < 0 {
		return fmt.Errorf("--concurrency: must be 0 (learnt) or more, got %d", *conc)
	}
	if *window < time.Second {
		return fmt.Errorf("--window: must be at least 1s, got %v", *window)
	}
	scenarios, err := promise.Lookup(*names)
	if err != nil {
		return fmt.Errorf("--scenario: %w", err)
	}
	chosen, err := pickVariants(*variants)
	if err != nil {
		return err
	}
	var bin string
	if *httpFlag {
		if bin, err = os.Executable(); err != nil {
			return fmt.Errorf("--http runs this binary as the mock and the gateway: %w", err)
		}
	}
	var rows []promise.Row
	var all []*promise.Result
	for _, sc := range scenarios {
		for _, v := range chosen {
			if !sc.Runs(v) {
				continue
			}
			for _, way := range []string{"sim", "http"} {
				if way == "sim" && !*simFlag || way == "http" && !*httpFlag {
					continue
				}
				if way == "http" && sc.Replicas > 1 && *redis == "" {
					fmt.Fprintf(stderr, "%s over HTTP left out: it needs --redis\n", sc.Name)
					continue
				}
				var results []*promise.Result
				for i := range *runs {
					s := *seed + uint64(i)
					var r *promise.Result
					if way == "sim" {
						r, err = promise.RunSim(ctx, sc, v, promise.SimOptions{Seed: s, Learn: *conc == 0})
					} else {
						r, err = promise.RunHTTP(ctx, sc, v, promise.HTTPOptions{Bin: bin, GatewayBin: *gateway, Seed: s, Window: *window, Redis: *redis, Concurrency: *conc})
					}
					if err != nil {
						return err
					}
					results = append(results, r)
				}
				all = append(all, results...)
				rows = append(rows, promise.Row{Scenario: sc, Result: promise.MedianOf(results)})
			}
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(all); err != nil {
			return err
		}
	} else if _, err := promise.WriteTable(stdout, rows); err != nil {
		return err
	}
	failed := 0
	for _, row := range rows {
		if len(promise.Failed(row.Scenario, row.Result)) > 0 {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d cells below a floor", failed, len(rows))
	}
	return nil
}

// pickVariants parses --variant: names as Variant.String spells them.
func pickVariants(s string) ([]promise.Variant, error) {
	all := promise.Variants()
	if strings.TrimSpace(s) == "" {
		return all, nil
	}
	var out []promise.Variant
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		found := false
		for _, v := range all {
			if v.String() == name {
				out = append(out, v)
				found = true
			}
		}
		if !found {
			known := make([]string, len(all))
			for i, v := range all {
				known[i] = v.String()
			}
			return nil, fmt.Errorf("--variant: no variant %q (%s)", name, strings.Join(known, ", "))
		}
	}
	return out, nil
}
