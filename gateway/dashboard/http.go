package dashboard

import (
	"embed"
	"encoding/json"
	"net/http"
)

// assets are the page and its files (README.md lists them).
//
//go:embed index.html app.js style.css favicon.svg uPlot.iife.min.js uPlot.min.css uPlot.LICENSE
var assets embed.FS

// csp keeps the page to its own origin: scripts and styles are files of
// the binary, data comes from the same listener, and nothing is fetched
// from anywhere else.
const csp = "default-src 'self'"

// Mount adds the dashboard's routes to mux: the page at /, its assets
// under /dashboard/ (and the icon at /favicon.ico), the history at
// /admin/v1/history and the live samples at /admin/v1/events.
func (b *Board) Mount(mux *http.ServeMux) {
	files := http.FileServerFS(assets)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		pageHeaders(w)
		http.ServeFileFS(w, r, assets, "index.html")
	})
	mux.Handle("GET /dashboard/", http.StripPrefix("/dashboard/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pageHeaders(w)
		files.ServeHTTP(w, r)
	})))
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) {
		pageHeaders(w)
		w.Header().Set("Content-Type", "image/svg+xml")
		http.ServeFileFS(w, r, assets, "favicon.svg")
	})
	mux.HandleFunc("GET /admin/v1/history", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(b.History())
	})
	mux.HandleFunc("GET /admin/v1/events", b.events)
}

func pageHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
}

// events streams server-sent events: first a "history" event (History:
// the meta and the last 15 minutes), then one message a second, each a
// Sample. It ends when the client leaves or Run ends.
func (b *Board) events(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	hist, samples, cancel := b.subscribe()
	defer cancel()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // a reverse proxy put in front (nginx) must pass each event on, not buffer them
	if err := writeEvent(w, "history", hist); err != nil {
		return
	}
	if rc.Flush() != nil {
		return
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case d, ok := <-samples:
			if !ok {
				return
			}
			if writeEvent(w, "", d) != nil || rc.Flush() != nil {
				return
			}
		}
	}
}

func writeEvent(w http.ResponseWriter, event string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	buf := make([]byte, 0, len(b)+32)
	if event != "" {
		buf = append(buf, "event: "...)
		buf = append(buf, event...)
		buf = append(buf, '\n')
	}
	buf = append(buf, "data: "...)
	buf = append(buf, b...)
	buf = append(buf, "\n\n"...)
	_, err = w.Write(buf)
	return err
}
