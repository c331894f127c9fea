package observe

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestLogFormats: log.format picks the handler; anything else is a
// config error naming the field.
func TestLogFormats(t *testing.T) {
	var text, js bytes.Buffer
	LogConfig{}.Logger(&text).Info("request", "request_id", "r1")
	LogConfig{Format: LogFormatJSON}.Logger(&js).Info("request", "request_id", "r1")
	if !strings.Contains(text.String(), "msg=request request_id=r1") {
		t.Errorf("default format wrote %q, want text", text.String())
	}
	var m map[string]any
	if err := json.Unmarshal(js.Bytes(), &m); err != nil || m["request_id"] != "r1" {
		t.Errorf("json format wrote %q (%v)", js.String(), err)
	}
	for _, ok := range []string{"", LogFormatText, LogFormatJSON} {
		if err := (LogConfig{Format: ok}).Validate(); err != nil {
			t.Errorf("log.format %q: %v", ok, err)
		}
	}
	err := LogConfig{Format: "xml"}.Validate()
	if want := `config: log.format: "xml", want text or json`; err == nil || err.Error() != want {
		t.Errorf("log.format xml: %v, want %q", err, want)
	}
}
