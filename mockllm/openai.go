package mockllm

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// This file speaks OpenAI's Chat Completions and legacy Completions APIs.
// The shapes follow the API reference closely enough for the official SDKs
// to decode them, including their stream accumulators.

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type openAIUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

func usageOf(c *call, tokensOut int) *openAIUsage {
	return &openAIUsage{PromptTokens: c.tokensIn, CompletionTokens: tokensOut, TotalTokens: c.tokensIn + tokensOut}
}

// finishReason is "length" when the answer reached the request's maximum
// (which it does unless X-Mock-Output-Tokens makes it shorter) and "stop"
// otherwise.
func finishReason(c *call) string {
	if c.reachedMax() {
		return "length"
	}
	return "stop"
}

// checkN refuses n > 1: the mock generates one choice, and answering one
// where several were asked would be a silent default.
func checkN(n *int) error {
	if n != nil && *n != 1 {
		return badRequest("n", "the mock provider generates exactly one choice; got %d", *n)
	}
	return nil
}

// streamError is the in-stream error OpenAI sends when a stream fails
// after its headers; the SDKs surface it as an error.
func streamError(msg string) []event {
	return []event{{data: map[string]any{"error": map[string]any{
		"message": msg, "type": "server_error", "param": nil, "code": nil,
	}}}}
}

// ---- /v1/chat/completions ----

type chatAPI struct{}

type chatRequest struct {
	Model               string            `json:"model"`
	Messages            []json.RawMessage `json:"messages"`
	Stream              bool              `json:"stream"`
	StreamOptions       *streamOptions    `json:"stream_options"`
	MaxTokens           *int              `json:"max_tokens"`
	MaxCompletionTokens *int              `json:"max_completion_tokens"`
	N                   *int              `json:"n"`
}

func (chatAPI) dialect() dialect { return openAI }

func (chatAPI) decode(body []byte, c *call) error {
	var req chatRequest
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
	if err := checkN(req.N); err != nil {
		return err
	}
	c.model, c.stream = req.Model, req.Stream
	c.includeUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	// max_completion_tokens supersedes the deprecated max_tokens.
	c.maxTokens, c.maxField = req.MaxTokens, "max_tokens"
	if req.MaxCompletionTokens != nil {
		c.maxTokens, c.maxField = req.MaxCompletionTokens, "max_completion_tokens"
	}
	return nil
}

type chatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []chatChoice `json:"choices"`
	Usage             *openAIUsage `json:"usage"`
	ServiceTier       string       `json:"service_tier"`
	SystemFingerprint string       `json:"system_fingerprint"`
}

type chatChoice struct {
	Index        int         `json:"index"`
	Message      chatMessage `json:"message"`
	Logprobs     any         `json:"logprobs"`
	FinishReason string      `json:"finish_reason"`
}

type chatMessage struct {
	Role        string `json:"role"`
	Content     string `json:"content"`
	Refusal     any    `json:"refusal"`
	Annotations []any  `json:"annotations"`
}

func chatID(c *call) string { return fmt.Sprintf("chatcmpl-mock%d", c.id) }

func (chatAPI) body(c *call, text string) any {
	return chatCompletion{
		ID: chatID(c), Object: "chat.completion", Created: c.created, Model: c.model,
		Choices: []chatChoice{{
			Message:      chatMessage{Role: "assistant", Content: text, Annotations: []any{}},
			FinishReason: finishReason(c),
		}},
		Usage:       usageOf(c, c.tokensOut),
		ServiceTier: "default", SystemFingerprint: "fp_mock",
	}
}

type chatChunk struct {
	ID                string        `json:"id"`
	Object            string        `json:"object"`
	Created           int64         `json:"created"`
	Model             string        `json:"model"`
	ServiceTier       string        `json:"service_tier"`
	SystemFingerprint string        `json:"system_fingerprint"`
	Choices           []chunkChoice `json:"choices"`
	// Usage is null on every chunk but the last when the client asked for
	// usage, and absent when it did not, as OpenAI does.
	Usage *openAIUsage `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index        int        `json:"index"`
	Delta        chunkDelta `json:"delta"`
	Logprobs     any        `json:"logprobs"`
	FinishReason *string    `json:"finish_reason"`
}

type chunkDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

func (chatAPI) chunk(c *call, choices []chunkChoice) chatChunk {
	return chatChunk{
		ID: chatID(c), Object: "chat.completion.chunk", Created: c.created, Model: c.model,
		ServiceTier: "default", SystemFingerprint: "fp_mock", Choices: choices,
	}
}

func (a chatAPI) head(c *call) []event {
	empty := ""
	return []event{{data: a.chunk(c, []chunkChoice{{Delta: chunkDelta{Role: "assistant", Content: &empty}}})}}
}

func (a chatAPI) delta(c *call, piece string) []event {
	return []event{{data: a.chunk(c, []chunkChoice{{Delta: chunkDelta{Content: &piece}}})}}
}

func (a chatAPI) tail(c *call) []event {
	fr := finishReason(c)
	ev := []event{{data: a.chunk(c, []chunkChoice{{FinishReason: &fr}})}}
	if c.includeUsage {
		last := a.chunk(c, []chunkChoice{})
		last.Usage = usageOf(c, c.tokensOut)
		ev = append(ev, event{data: last})
	}
	return append(ev, doneEvent)
}

func (chatAPI) abort(*call) []event {
	return streamError("The mock provider is shutting down; the stream was cut.")
}

// ---- /v1/completions ----

type completionsAPI struct{}

type completionRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	Stream        bool            `json:"stream"`
	StreamOptions *streamOptions  `json:"stream_options"`
	MaxTokens     *int            `json:"max_tokens"`
	N             *int            `json:"n"`
}

func (completionsAPI) dialect() dialect { return openAI }

func (completionsAPI) decode(body []byte, c *call) error {
	var req completionRequest
	if err := decodeJSON(body, &req); err != nil {
		return err
	}
	if err := checkN(req.N); err != nil {
		return err
	}
	c.model, c.stream = req.Model, req.Stream
	c.includeUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	c.promptChars = textChars(req.Prompt)
	c.maxTokens, c.maxField = req.MaxTokens, "max_tokens"
	return nil
}

type completionChoice struct {
	Text         string  `json:"text"`
	Index        int     `json:"index"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

type textCompletion struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	SystemFingerprint string             `json:"system_fingerprint"`
	Choices           []completionChoice `json:"choices"`
	Usage             *openAIUsage       `json:"usage,omitempty"`
}

func (completionsAPI) completion(c *call, choices []completionChoice) textCompletion {
	return textCompletion{
		ID: fmt.Sprintf("cmpl-mock%d", c.id), Object: "text_completion", Created: c.created,
		Model: c.model, SystemFingerprint: "fp_mock", Choices: choices,
	}
}

func (a completionsAPI) body(c *call, text string) any {
	fr := finishReason(c)
	tc := a.completion(c, []completionChoice{{Text: text, FinishReason: &fr}})
	tc.Usage = usageOf(c, c.tokensOut)
	return tc
}

func (completionsAPI) head(*call) []event { return nil }

func (a completionsAPI) delta(c *call, piece string) []event {
	return []event{{data: a.completion(c, []completionChoice{{Text: piece}})}}
}

func (a completionsAPI) tail(c *call) []event {
	fr := finishReason(c)
	ev := []event{{data: a.completion(c, []completionChoice{{FinishReason: &fr}})}}
	if c.includeUsage {
		last := a.completion(c, []completionChoice{})
		last.Usage = usageOf(c, c.tokensOut)
		ev = append(ev, event{data: last})
	}
	return append(ev, doneEvent)
}

func (completionsAPI) abort(*call) []event {
	return streamError("The mock provider is shutting down; the stream was cut.")
}
