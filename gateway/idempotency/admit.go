package idempotency

import (
	"context"
	"crypto/sha256"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/gateway/wire"
)

// Deps are what the store takes of the gateway to answer a request with an
// error of its own.
type Deps struct {
	// WriteError writes an error answer in the caller's API shape (OpenAI's
	// or Anthropic's). Nil means wire.WriteJSONError.
	WriteError func(w http.ResponseWriter, status int, body contract.ErrorBody)
	// BadInput counts a request refused as malformed or misused, by the
	// error's code (the gateway's bad-input metric). Nil means not counted.
	BadInput func(code string)
}

func (d Deps) withDefaults() Deps {
	if d.WriteError == nil {
		d.WriteError = wire.WriteJSONError
	}
	if d.BadInput == nil {
		d.BadInput = func(string) {}
	}
	return d
}

// Admit runs the Idempotency-Key part of a call before admission, for the
// request r of tenant whose body is body (stream: a streamed answer was
// asked for). ctx is the call's context: its deadline is the caller's, to
// which a duplicate waits for the request in flight at most.
//
// It returns the flight to complete when this request is to make the call
// (nil when it has no key), or handled when it has been answered on w:
// from another request's answer, or with an error (Deps). A request whose
// caller left while it waited is handled with nothing written.
func (s *Store) Admit(ctx context.Context, w http.ResponseWriter, r *http.Request, tenant string, body []byte, stream bool) (f *Flight, handled bool) {
	k, bad := parseKey(r.Header)
	if bad != nil {
		s.refuse(w, bad)
		return nil, true
	}
	if k == "" {
		return nil, false
	}
	id := tenantKey{tenant: tenant, key: k}
	sum := requestSum(r, body)
	deadline, _ := ctx.Deadline()
	waited := false
	for {
		now := time.Now()
		st, e, f := s.begin(id, sum, stream, deadline, now)
		switch st {
		case stateLead:
			return f, false
		case stateWait:
			select {
			case <-e.done:
				waited = true
				continue // stored, or dropped: look again
			case <-ctx.Done():
				if r.Context().Err() != nil {
					return nil, true // the caller left: nobody to answer
				}
				s.deps.WriteError(w, http.StatusGatewayTimeout, contract.ErrorBody{Error: contract.ErrorDetail{
					Message: "the request's deadline (X-Sluice-Timeout-Ms) passed while the request with the same Idempotency-Key was still in flight",
					Type:    "timeout_error", Code: "deadline_exceeded"}})
				return nil, true
			}
		case stateStored:
			how := "stored"
			if waited {
				how = "waited"
			}
			s.replays.WithLabelValues(how).Inc()
			writeReplay(w, e.answer)
			return nil, true
		case stateMismatch:
			s.refuse(w, &wire.BadRequest{Status: http.StatusUnprocessableEntity, Code: "idempotency_key_reused",
				Msg: contract.HeaderIdempotencyKey + ": the key was used for a different request (method, path or body) within the idempotency window; use a new key for a new request"})
			return nil, true
		case stateStreaming:
			w.Header().Set(contract.HeaderRetryAfter, strconv.FormatInt(contract.RetryAfterSeconds(e.deadline.Sub(now)), 10))
			s.refuse(w, &wire.BadRequest{Status: http.StatusConflict, Code: "idempotency_key_in_flight",
				Msg: contract.HeaderIdempotencyKey + ": a streamed request with this key is still in flight; its answer is replayed once the stream has ended (see Retry-After)"})
			return nil, true
		case stateNotKept:
			w.Header().Set(contract.HeaderRetryAfter, strconv.FormatInt(contract.RetryAfterSeconds(e.expires.Sub(now)), 10))
			s.refuse(w, &wire.BadRequest{Status: http.StatusConflict, Code: "idempotency_answer_not_kept",
				Msg: contract.HeaderIdempotencyKey + ": a request with this key was answered, but its answer was larger than idempotency.max_entry_bytes and was not kept; the key may be used again after Retry-After"})
			return nil, true
		}
	}
}

// refuse counts r as bad input and writes it as an invalid request.
func (s *Store) refuse(w http.ResponseWriter, r *wire.BadRequest) {
	s.deps.BadInput(r.Code)
	s.deps.WriteError(w, r.Status, contract.ErrorBody{Error: contract.ErrorDetail{
		Message: r.Msg, Type: contract.ErrorTypeInvalidRequest, Code: r.Code}})
}

// parseKey reads the request's Idempotency-Key: "" when it has none, a
// refusal naming the header when it is malformed.
func parseKey(h http.Header) (string, *wire.BadRequest) {
	vs, ok := h[contract.HeaderIdempotencyKey]
	if !ok {
		return "", nil
	}
	name := contract.HeaderIdempotencyKey
	switch {
	case len(vs) != 1:
		return "", wire.BadHeader(name, "sent %d times: a request has one key", len(vs))
	case vs[0] == "":
		return "", wire.BadHeader(name, "empty: a key is 1 to %d printable ASCII characters", maxKey)
	case len(vs[0]) > maxKey:
		return "", wire.BadHeader(name, "%d bytes, above the limit of %d", len(vs[0]), maxKey)
	}
	for i := 0; i < len(vs[0]); i++ {
		if c := vs[0][i]; c < 0x20 || c > 0x7e {
			return "", wire.BadHeader(name, "byte %d is not printable ASCII (0x20-0x7e): a key is 1 to %d of them", i, maxKey)
		}
	}
	return vs[0], nil
}

// requestSum hashes what makes two requests the same: method, path, query
// and body bytes, each length-prefixed so that no two splits collide.
func requestSum(r *http.Request, body []byte) [sha256.Size]byte {
	h := sha256.New()
	for _, part := range []string{r.Method, r.URL.Path, r.URL.RawQuery} {
		h.Write([]byte(strconv.Itoa(len(part)) + ":" + part))
	}
	h.Write(body)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// writeReplay writes a stored answer as the provider's was written.
func writeReplay(w http.ResponseWriter, a *answer) {
	h := w.Header()
	for k, vs := range a.header {
		h[k] = append([]string(nil), vs...)
	}
	if a.status != http.StatusNoContent && a.status != http.StatusNotModified {
		h.Set("Content-Length", strconv.Itoa(len(a.body)))
	}
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}
