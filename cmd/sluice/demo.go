package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/demo"
)

func init() {
	register("demo", "an overload storm straight at a provider, then through sluice, side by side (under a minute)", runDemo)
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg demo.Config
	fs.IntVar(&cfg.Slots, "slots", 8, "the provider's concurrent calls")
	fs.DurationVar(&cfg.Median, "median", 300*time.Millisecond, "the provider's median service time for a model of latency factor 1 (the demo's gpt-4o is 1.5)")
	fs.Float64Var(&cfg.Load, "load", 5, "the storm's rate as a multiple of the provider's capacity")
	fs.DurationVar(&cfg.Duration, "duration", 12*time.Second, "how long each storm lasts")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the storm's arrivals")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	switch {
	case cfg.Slots < 1:
		return fmt.Errorf("--slots: %d, want ≥ 1", cfg.Slots)
	case cfg.Median <= 0:
		return fmt.Errorf("--median: %v, want > 0", cfg.Median)
	case cfg.Load <= 0:
		return fmt.Errorf("--load: %v, want > 0", cfg.Load)
	case cfg.Duration <= 0:
		return fmt.Errorf("--duration: %v, want > 0", cfg.Duration)
	}
	_, err := demo.Run(ctx, cfg, stdout)
	return err
}
