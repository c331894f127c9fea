package observe

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// The access line is written for every request, and slog's TextHandler
// spent about 3.5 µs on it (a tenth of a short call's handler CPU): the
// record's copy of 20-odd attributes, the caller's program counter, and
// the general formatting of a handler that serves groups, ReplaceAttr
// and every kind of value. textHandler is the TextHandler that
// LogConfig.Logger builds for the text format, and LogAccess writes the
// line through it by hand, in the same bytes (TestTextLineIsSlogs), one
// write a line as before.

// textHandler is slog's TextHandler over w, with the access line written
// by hand (line). Its WithAttrs and WithGroup are the TextHandler's: a
// logger derived from it writes every line through slog.
type textHandler struct {
	*slog.TextHandler
	w *lockedWriter
}

func newTextHandler(w io.Writer) *textHandler {
	lw := &lockedWriter{w: w}
	return &textHandler{TextHandler: slog.NewTextHandler(lw, nil), w: lw}
}

// lockedWriter serialises the TextHandler's writes and the hand-written
// lines', as the TextHandler alone serialises its own.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

var linePool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledLine bounds the buffers kept: a line of odd bytes, each quoted
// as \x.., must not keep a large buffer alive.
const maxPooledLine = 16 << 10

// line writes a line at level Info, at time t, of msg and attrs, as the
// TextHandler writes it with no options; attrs are strings, integers and
// floats (appendText). Anything else goes through the TextHandler.
func (h *textHandler) line(t time.Time, msg string, attrs []slog.Attr) error {
	bp := linePool.Get().(*[]byte)
	b, ok := appendTextLine((*bp)[:0], t, msg, attrs)
	var err error
	if ok {
		_, err = h.w.Write(b)
	} else {
		r := slog.NewRecord(t, slog.LevelInfo, msg, 0)
		r.AddAttrs(attrs...)
		err = h.Handle(context.Background(), r)
	}
	if cap(b) <= maxPooledLine {
		*bp = b
		linePool.Put(bp)
	}
	return err
}

// appendTextLine appends what slog.TextHandler writes for a record at
// level Info, without source or groups; ok is false for an attribute
// of another kind than string, int64 or float64.
func appendTextLine(b []byte, t time.Time, msg string, attrs []slog.Attr) ([]byte, bool) {
	if !t.IsZero() {
		b = append(b, "time="...)
		b = appendRFC3339Millis(b, t.Round(0))
		b = append(b, ' ')
	}
	b = append(b, "level=INFO msg="...)
	b = appendTextString(b, msg)
	for _, a := range attrs {
		if a.Key == "" {
			return b, false // slog's rules for empty attributes
		}
		b = append(b, ' ')
		b = appendTextString(b, a.Key)
		b = append(b, '=')
		switch v := a.Value; v.Kind() {
		case slog.KindString:
			b = appendTextString(b, v.String())
		case slog.KindInt64:
			b = strconv.AppendInt(b, v.Int64(), 10)
		case slog.KindFloat64:
			b = strconv.AppendFloat(b, v.Float64(), 'g', -1, 64)
		default:
			return b, false
		}
	}
	return append(b, '\n'), true
}

// appendRFC3339Millis is slog's: RFC 3339 to the millisecond, always
// three digits.
func appendRFC3339Millis(b []byte, t time.Time) []byte {
	// Format according to time.RFC3339Nano since it is highly optimized,
	// but truncate it to use millisecond resolution. That format trims
	// trailing 0s, so add 1/10 millisecond to guarantee that there are
	// exactly 4 digits after the period, and drop the 4th.
	const prefixLen = len("2006-01-02T15:04:05.000")
	n := len(b)
	t = t.Truncate(time.Millisecond).Add(time.Millisecond / 10)
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b[:n+prefixLen], b[n+prefixLen+1:]...)
}

// appendTextString is a string as the TextHandler writes it: as it is,
// or quoted when it is empty or holds a space, '=', '"', a control
// character, or a rune that is invalid, a space or not printable.
func appendTextString(b []byte, s string) []byte {
	if needsQuoting(s) {
		return strconv.AppendQuote(b, s)
	}
	return append(b, s...)
}

func needsQuoting(s string) bool {
	if len(s) == 0 {
		return true
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c <= ' ' || c == '=' || c == '"' {
				return true
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return true
		}
		i += size
	}
	return false
}
