package mockllm

import (
	"encoding/json"
	"fmt"
)

// This file speaks OpenAI's Responses API (/v1/responses): one message
// output item with one output_text part, streamed as the documented
// sequence of typed events.

type responsesAPI struct{}

type responsesRequest struct {
	Model           string          `json:"model"`
	Input           json.RawMessage `json:"input"`
	Instructions    *string         `json:"instructions"`
	MaxOutputTokens *int            `json:"max_output_tokens"`
	Stream          bool            `json:"stream"`
}

func (responsesAPI) dialect() dialect { return openAI }

func (responsesAPI) decode(body []byte, c *call) error {
	var req responsesRequest
	if err := decodeJSON(body, &req); err != nil {
		return err
	}
	c.model, c.stream = req.Model, req.Stream
	c.promptChars = textChars(req.Input)
	if req.Instructions != nil {
		c.promptChars += len([]rune(*req.Instructions))
	}
	c.maxTokens, c.maxField = req.MaxOutputTokens, "max_output_tokens"
	return nil
}

func respID(c *call) string { return fmt.Sprintf("resp_mock%d", c.id) }
func msgID(c *call) string  { return fmt.Sprintf("msg_mock%d", c.id) }

func outputText(text string) map[string]any {
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}
}

func messageItem(c *call, status string, content []any) map[string]any {
	return map[string]any{"type": "message", "id": msgID(c), "status": status, "role": "assistant", "content": content}
}

// response is the response object; final is false for the copies carried
// by response.created and response.in_progress. An answer that reached
// max_output_tokens ends "incomplete", as the real API reports it; the
// mock reaches it unless X-Mock-Output-Tokens makes the answer shorter.
func (responsesAPI) response(c *call, final bool) map[string]any {
	r := map[string]any{
		"id": respID(c), "object": "response", "created_at": c.created, "model": c.model,
		"status": "in_progress", "error": nil, "incomplete_details": nil,
		"output": []any{}, "usage": nil, "parallel_tool_calls": true,
		"tool_choice": "auto", "tools": []any{}, "temperature": 1.0, "top_p": 1.0,
		"max_output_tokens": c.maxTokens,
	}
	if !final {
		return r
	}
	r["status"] = "completed"
	if c.reachedMax() {
		r["status"] = "incomplete"
		r["incomplete_details"] = map[string]any{"reason": "max_output_tokens"}
	}
	text := tokenText(0, c.tokensOut)
	r["output"] = []any{messageItem(c, "completed", []any{outputText(text)})}
	r["usage"] = map[string]any{
		"input_tokens":          c.tokensIn,
		"input_tokens_details":  map[string]int{"cached_tokens": 0},
		"output_tokens":         c.tokensOut,
		"output_tokens_details": map[string]int{"reasoning_tokens": 0},
		"total_tokens":          c.tokensIn + c.tokensOut,
	}
	return r
}

func (a responsesAPI) body(c *call, _ string) any { return a.response(c, true) }

// ev builds one typed event with the next sequence number.
func (responsesAPI) ev(c *call, typ string, fields map[string]any) event {
	fields["type"] = typ
	fields["sequence_number"] = c.seq
	c.seq++
	return event{name: typ, data: fields}
}

func (a responsesAPI) head(c *call) []event {
	return []event{
		a.ev(c, "response.created", map[string]any{"response": a.response(c, false)}),
		a.ev(c, "response.in_progress", map[string]any{"response": a.response(c, false)}),
		a.ev(c, "response.output_item.added", map[string]any{
			"output_index": 0, "item": messageItem(c, "in_progress", []any{})}),
		a.ev(c, "response.content_part.added", map[string]any{
			"item_id": msgID(c), "output_index": 0, "content_index": 0, "part": outputText("")}),
	}
}

func (a responsesAPI) delta(c *call, piece string) []event {
	return []event{a.ev(c, "response.output_text.delta", map[string]any{
		"item_id": msgID(c), "output_index": 0, "content_index": 0, "delta": piece, "logprobs": []any{}})}
}

func (a responsesAPI) tail(c *call) []event {
	text := tokenText(0, c.tokensOut)
	final := a.response(c, true)
	return []event{
		a.ev(c, "response.output_text.done", map[string]any{
			"item_id": msgID(c), "output_index": 0, "content_index": 0, "text": text, "logprobs": []any{}}),
		a.ev(c, "response.content_part.done", map[string]any{
			"item_id": msgID(c), "output_index": 0, "content_index": 0, "part": outputText(text)}),
		a.ev(c, "response.output_item.done", map[string]any{
			"output_index": 0, "item": messageItem(c, "completed", []any{outputText(text)})}),
		a.ev(c, "response."+final["status"].(string), map[string]any{"response": final}),
	}
}

func (a responsesAPI) abort(c *call) []event {
	return []event{a.ev(c, "error", map[string]any{
		"code": "server_error", "param": nil,
		"message": "The mock provider is shutting down; the stream was cut."})}
}
