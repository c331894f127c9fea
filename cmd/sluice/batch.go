package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/schollz/progressbar/v3"
)

func init() {
	register("batch", "submit a batch file to a gateway and follow it; or status, cancel, results of a batch", runBatch)
}

// batchFlags are the flags every batch subcommand takes.
type batchFlags struct {
	gateway string
	keyEnv  string
}

func (f *batchFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.gateway, "gateway", "http://127.0.0.1:8080", "the gateway's base `URL`")
	fs.StringVar(&f.keyEnv, "api-key-env", "OPENAI_API_KEY", "environment `variable` holding your key for the gateway (none needed without tenants)")
}

func (f *batchFlags) client() openai.Client {
	key := os.Getenv(f.keyEnv)
	if key == "" {
		key = "none" // a gateway without tenants takes any
	}
	return openai.NewClient(option.WithBaseURL(f.gateway+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(2))
}

func runBatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	usage := errors.New("usage: sluice batch submit FILE [--window 24h] | status ID | cancel ID | results ID [--errors]")
	if len(args) == 0 {
		return usage
	}
	fs := flag.NewFlagSet("batch "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f batchFlags
	f.register(fs)
	window := fs.String("window", "24h", "completion `window` of a submitted batch (24h, or any Ns, Nm, Nh the gateway allows)")
	noWait := fs.Bool("no-wait", false, "submit: print the batch and return, without following it")
	poll := fs.Duration("poll", time.Second, "how often to look at the batch while following it")
	errorsFile := fs.Bool("errors", false, "results: print the error file instead of the output")
	sub := args[0]
	// The ID or FILE may come before or after the flags.
	rest := args[1:]
	var operand string
	if len(rest) > 0 && len(rest[0]) > 0 && rest[0][0] != '-' {
		operand, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		return err
	}
	switch {
	case operand == "" && fs.NArg() == 1:
		operand = fs.Arg(0)
	case operand == "" || fs.NArg() > 0:
		return usage
	}
	if *poll <= 0 {
		return fmt.Errorf("--poll: %v, want > 0", *poll)
	}
	client := f.client()
	switch sub {
	case "submit":
		return batchSubmit(ctx, client, operand, *window, !*noWait, *poll, stdout, stderr)
	case "status":
		b, err := client.Batches.Get(ctx, operand)
		if err != nil {
			return err
		}
		printBatch(stdout, b)
		return nil
	case "cancel":
		b, err := client.Batches.Cancel(ctx, operand)
		if err != nil {
			return err
		}
		printBatch(stdout, b)
		return nil
	case "results":
		b, err := client.Batches.Get(ctx, operand)
		if err != nil {
			return err
		}
		id := b.OutputFileID
		if *errorsFile {
			id = b.ErrorFileID
		}
		if id == "" {
			return fmt.Errorf("batch %s (%s) has no %s file yet", b.ID, b.Status, map[bool]string{false: "output", true: "error"}[*errorsFile])
		}
		resp, err := client.Files.Content(ctx, id)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.Copy(stdout, resp.Body)
		return err
	}
	return usage
}

// batchSubmit uploads the file, creates the batch (its endpoint is the
// first line's url) and, with follow, shows its progress until it ends.
func batchSubmit(ctx context.Context, client openai.Client, path, window string, follow bool, poll time.Duration, stdout, stderr io.Writer) error {
	content, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var first struct {
		URL string `json:"url"`
	}
	line, _, _ := bytes.Cut(bytes.TrimSpace(content), []byte("\n"))
	if err := json.Unmarshal(line, &first); err != nil || first.URL == "" {
		return fmt.Errorf("%s: line 1 is not a request with a url", path)
	}
	f, err := client.Files.New(ctx, openai.FileNewParams{File: openai.File(bytes.NewReader(content), filepath.Base(path), "application/jsonl"), Purpose: openai.FilePurposeBatch})
	if err != nil {
		return err
	}
	// OpenAI's window is 24h; another is sluice's own parameter.
	var opts []option.RequestOption
	if window != "24h" {
		opts = append(opts, option.WithJSONSet("sluice_completion_window", window))
	}
	b, err := client.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpoint(first.URL),
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h}, opts...)
	if err != nil {
		var apiErr *openai.Error
		if errors.As(err, &apiErr) && apiErr.StatusCode == 429 {
			return fmt.Errorf("the gateway refused the batch: %s (retry after %s s)", apiErr.Message, apiErr.Response.Header.Get("Retry-After"))
		}
		return err
	}
	// The batch is validating: its count is the file's lines until it starts.
	n := int64(0)
	for l := range bytes.Lines(content) {
		if len(bytes.TrimSpace(l)) > 0 {
			n++
		}
	}
	fmt.Fprintf(stdout, "batch %s: %d requests, window %s\n", b.ID, n, window)
	if !follow {
		return nil
	}
	bar := progressbar.NewOptions64(n, progressbar.OptionSetWriter(stderr), progressbar.OptionSetDescription(b.ID),
		progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true), progressbar.OptionSetElapsedTime(true),
		progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionSetWidth(30))
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for !batchEnded(b.Status) {
		select {
		case <-ctx.Done():
			fmt.Fprintln(stderr)
			fmt.Fprintf(stdout, "stopped following batch %s (%s); it runs on: sluice batch status %s\n", b.ID, b.Status, b.ID)
			return nil
		case <-tick.C:
		}
		if b, err = client.Batches.Get(ctx, b.ID); err != nil {
			return err
		}
		_ = bar.Set64(b.RequestCounts.Completed + b.RequestCounts.Failed)
	}
	if b.Status == openai.BatchStatusFailed {
		fmt.Fprintln(stderr)
		for _, e := range b.Errors.Data {
			fmt.Fprintf(stdout, "line %d: %s: %s\n", e.Line, e.Code, e.Message)
		}
	}
	_ = bar.Finish()
	fmt.Fprintln(stderr)
	printBatch(stdout, b)
	return nil
}

func batchEnded(s openai.BatchStatus) bool {
	switch s {
	case openai.BatchStatusCompleted, openai.BatchStatusExpired, openai.BatchStatusCancelled, openai.BatchStatusFailed:
		return true
	}
	return false
}

func printBatch(w io.Writer, b *openai.Batch) {
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	c := b.RequestCounts
	fmt.Fprintf(bw, "batch %s: %s, %d of %d completed, %d failed\n", b.ID, b.Status, c.Completed, c.Total, c.Failed)
	if b.OutputFileID != "" {
		fmt.Fprintf(bw, "output: %s (sluice batch results %s)\n", b.OutputFileID, b.ID)
	}
	if b.ErrorFileID != "" {
		fmt.Fprintf(bw, "errors: %s (sluice batch results %s --errors)\n", b.ErrorFileID, b.ID)
	}
}
