package mockllm

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// This file speaks Anthropic's Messages API (/v1/messages): its JSON, its
// named stream events and its error shape.

type messagesAPI struct{}

type messagesRequest struct {
	Model     string            `json:"model"`
	Messages  []json.RawMessage `json:"messages"`
	System    json.RawMessage   `json:"system"`
	MaxTokens *int              `json:"max_tokens"`
	Stream    bool              `json:"stream"`
}

func (messagesAPI) dialect() dialect { return anthropic }

func (messagesAPI) decode(body []byte, c *call) error {
	var req messagesRequest
	if err := decodeJSON(body, &req); err != nil {
		return err
	}
	if len(req.Messages) == 0 {
		return badRequest("messages", "required: a non-empty array of messages")
	}
	for i, m := range req.Messages {
		if !bytes.HasPrefix(bytes.TrimSpace(m), []byte("{")) {
			return badRequest(fmt.Sprintf("messages[%d]", i), "must be an object")
		}
		c.promptChars += textChars(m)
	}
	// Anthropic requires max_tokens; so does the mock, to answer as it would.
	if req.MaxTokens == nil {
		return badRequest("max_tokens", "required by the Messages API")
	}
	c.promptChars += textChars(req.System)
	c.model, c.stream = req.Model, req.Stream
	c.maxTokens, c.maxField = req.MaxTokens, "max_tokens"
	return nil
}

// stopReason is "max_tokens" when the answer reached max_tokens (which it
// does unless X-Mock-Output-Tokens makes it shorter) and "end_turn", the
// model's own end, otherwise.
func stopReason(c *call) string {
	if c.reachedMax() {
		return "max_tokens"
	}
	return "end_turn"
}

func anthropicID(c *call) string { return fmt.Sprintf("msg_mock%d", c.id) }

// message is the message object; in the stream's message_start it has no
// content yet, no stop reason and output_tokens 1 (Anthropic's own value).
func (messagesAPI) message(c *call, text *string) map[string]any {
	m := map[string]any{
		"id": anthropicID(c), "type": "message", "role": "assistant", "model": c.model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]int{"input_tokens": c.tokensIn, "output_tokens": 1},
	}
	if text != nil {
		m["content"] = []any{map[string]any{"type": "text", "text": *text}}
		m["stop_reason"] = stopReason(c)
		m["usage"] = map[string]int{"input_tokens": c.tokensIn, "output_tokens": c.tokensOut}
	}
	return m
}

func (a messagesAPI) body(c *call, text string) any { return a.message(c, &text) }

func (a messagesAPI) head(c *call) []event {
	return []event{
		{name: "message_start", data: map[string]any{"type": "message_start", "message": a.message(c, nil)}},
		{name: "content_block_start", data: map[string]any{
			"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}}},
		{name: "ping", data: map[string]any{"type": "ping"}},
	}
}

func (messagesAPI) delta(_ *call, piece string) []event {
	return []event{{name: "content_block_delta", data: map[string]any{
		"type": "content_block_delta", "index": 0,
		"delta": map[string]any{"type": "text_delta", "text": piece}}}}
}

func (messagesAPI) tail(c *call) []event {
	return []event{
		{name: "content_block_stop", data: map[string]any{"type": "content_block_stop", "index": 0}},
		{name: "message_delta", data: map[string]any{
			"type":  "message_delta",
			"delta": map[string]any{"stop_reason": stopReason(c), "stop_sequence": nil},
			"usage": map[string]int{"output_tokens": c.tokensOut}}},
		{name: "message_stop", data: map[string]any{"type": "message_stop"}},
	}
}

func (messagesAPI) abort(*call) []event {
	return []event{{name: "error", data: errorBody(anthropic, errServerClosed())}}
}
