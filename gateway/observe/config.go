package observe

import (
	"fmt"
	"io"
	"log/slog"
)

// Log formats.
const (
	LogFormatText = "text"
	LogFormatJSON = "json"
)

// LogConfig is how the gateway's logs are written: the gateway config's
// `log:` section.
type LogConfig struct {
	// Format is text (logfmt-style key=value, for a terminal) or json (one
	// JSON object per line, for a log shipper). Empty means text.
	Format string `yaml:"format"`
}

// Validate checks the section; it names the field at fault by its YAML
// path in the gateway's config (log.…).
func (c LogConfig) Validate() error {
	switch c.Format {
	case "", LogFormatText, LogFormatJSON:
		return nil
	}
	return fmt.Errorf("config: log.format: %q, want text or json", c.Format)
}

// Logger returns a logger writing to w in the configured format, for the
// gateway's Options.Logger. The text format's is slog's TextHandler, whose
// access lines LogAccess writes by hand in the same bytes (textHandler).
func (c LogConfig) Logger(w io.Writer) *slog.Logger {
	if c.Format == LogFormatJSON {
		return slog.New(slog.NewJSONHandler(w, nil))
	}
	return slog.New(newTextHandler(w))
}
