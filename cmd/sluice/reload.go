package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/sluicehq/sluice/config"
)

// configSource is how serve re-reads its config for a reload: the file it
// was started with, and the flags it was started with over it again (a
// flag given at start keeps overriding the file, as it did then). Nil
// without --config: there is nothing to re-read.
func (f *serveFlags) configSource(fs *flag.FlagSet) func() (config.Config, error) {
	if f.config == "" {
		return nil
	}
	return func() (config.Config, error) { return f.load(fs) }
}

// reloadOnSignal reloads the gateway's config on each value sig delivers
// (SIGHUP in serve) until ctx ends; the returned function waits for it to
// stop. A refused reload is logged and counted by the gateway, which keeps
// its running config.
func reloadOnSignal(ctx context.Context, sig <-chan os.Signal, reload func() error) (wait func()) {
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-sig:
				_ = reload()
			}
		}
	})
	return wg.Wait
}

// notifyHangup delivers SIGHUP on the returned channel instead of letting
// it end the process, until stop is called.
func notifyHangup() (sig <-chan os.Signal, stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	return ch, func() { signal.Stop(ch) }
}
