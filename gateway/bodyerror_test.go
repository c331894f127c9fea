package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/mockllm"
)

// rawExchange sends head, then body, on a fresh TCP connection; closeWrite
// half-closes the connection after the body (a client that is cut off),
// otherwise the connection stays open and silent (a client that stalls).
// It returns the answer.
func rawExchange(t *testing.T, addr, head, body string, closeWrite bool) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, head+body); err != nil {
		t.Fatal(err)
	}
	if closeWrite {
		_ = c.(*net.TCPConn).CloseWrite()
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// leaks matches what an error body must never carry: a socket address
// (IPv4 or bracketed IPv6 with a port) or Go's own error wording.
var leaks = regexp.MustCompile(`\d+\.\d+\.\d+\.\d+:\d+|\[[0-9a-fA-F:.]+\]:\d+|read tcp|i/o timeout|EOF|unexpected|malformed chunk|multipart:|invalid character|json:`)

// TestBodyErrorsSayNothingOfTheSocket sends every way to stall, cut or
// malform a body, over real TCP, to a chat completion, to POST /v1/files
// and to POST /v1/batches: each is a 4xx JSON error whose body names what
// went wrong in the caller's terms, never an address or a Go error string.
func TestBodyErrorsSayNothingOfTheSocket(t *testing.T) {
	_, up := startMock(t, mockllm.Config{})
	cfg := batchConfig(t, up.URL)
	cfg.Server.ReadBodyTimeout = config.Duration(300 * time.Millisecond)
	s := serve(t, cfg)
	addr := strings.TrimPrefix(s.url, "http://")

	const boundary = "XyZ"
	form := "--" + boundary + "\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n" +
		"--" + boundary + "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.jsonl\"\r\nContent-Type: application/jsonl\r\n\r\n" +
		`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[]}}` + "\n"
	routes := []struct {
		path, ctype, partial, malformed string
	}{
		{"/v1/chat/completions", "application/json", `{"model":"gpt-4o-mini","messages":[`, `{"model":"gpt-4o-mini",`},
		{"/v1/files", "multipart/form-data; boundary=" + boundary, form, form}, // malformed: no closing boundary
		{"/v1/batches", "application/json", `{"input_file_id":"file-`, `{"input_file_id":`},
	}
	head := func(path, ctype, framing string) string {
		return "POST " + path + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-acme\r\nContent-Type: " + ctype + "\r\n" + framing + "\r\n"
	}
	chunk := func(s string) string { return strconv.FormatInt(int64(len(s)), 16) + "\r\n" + s + "\r\n" }
	for _, rt := range routes {
		sized := "Content-Length: " + strconv.Itoa(len(rt.partial)+1000) + "\r\n"
		chunked := "Transfer-Encoding: chunked\r\n"
		cases := []struct {
			name, framing, body string
			closeWrite          bool
			status              int
		}{
			{"stalled, sized", sized, rt.partial, false, http.StatusRequestTimeout},
			{"stalled, chunked", chunked, chunk(rt.partial), false, http.StatusRequestTimeout},
			{"stalled before a byte", sized, "", false, http.StatusRequestTimeout},
			{"cut, sized", sized, rt.partial, true, http.StatusBadRequest},
			{"cut, chunked", chunked, chunk(rt.partial), true, http.StatusBadRequest},
			{"cut inside a chunk", chunked, "400\r\n" + rt.partial, true, http.StatusBadRequest},
			{"broken chunk size", chunked, "zz\r\n" + rt.partial, false, http.StatusBadRequest},
			{"malformed", "Content-Length: " + strconv.Itoa(len(rt.malformed)) + "\r\n", rt.malformed, false, http.StatusBadRequest},
		}
		for _, c := range cases {
			t.Run(rt.path+"/"+c.name, func(t *testing.T) {
				resp, body := rawExchange(t, addr, head(rt.path, rt.ctype, c.framing), c.body, c.closeWrite)
				if resp.StatusCode != c.status {
					t.Errorf("status %d, want %d: %s", resp.StatusCode, c.status, body)
				}
				if m := leaks.FindString(body); m != "" {
					t.Errorf("the body carries %q: %s", m, body)
				}
				if !strings.Contains(body, `"message"`) {
					t.Errorf("not a JSON error: %s", body)
				}
			})
		}
	}
}
