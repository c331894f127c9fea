package mockllm

import (
	"errors"
	"net/http"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// The official OpenAI Go SDK must accept the mock's answers: it is what
// users point at it, and what the gateway's tests will use.

func sdkClient(t *testing.T, cfg Config) (*Server, openai.Client) {
	t.Helper()
	s, ts := newHTTP(t, cfg)
	return s, openai.NewClient(
		option.WithBaseURL(ts.URL+"/v1/"),
		option.WithAPIKey("sk-mock"),
		option.WithHTTPClient(ts.Client()),
		option.WithMaxRetries(0),
	)
}

func TestSDKChatCompletion(t *testing.T) {
	s, client := sdkClient(t, Config{})
	res, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
		Model:               openai.ChatModelGPT4oMini,
		Messages:            []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say something twelve.")},
		MaxCompletionTokens: openai.Int(12),
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Model != "gpt-4o-mini" || len(res.Choices) != 1 || res.Choices[0].Message.Content != tokenText(0, 12) ||
		res.Choices[0].FinishReason != "length" {
		t.Errorf("completion %+v", res)
	}
	if res.Usage.PromptTokens != 6 || res.Usage.CompletionTokens != 12 || res.Usage.TotalTokens != 18 {
		t.Errorf("usage %+v, want 6+12", res.Usage)
	}
	if st := s.Stats(); st.Delivered != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestSDKChatCompletionStreaming(t *testing.T) {
	_, client := sdkClient(t, Config{})
	stream := client.Chat.Completions.NewStreaming(t.Context(), openai.ChatCompletionNewParams{
		Model:         openai.ChatModelGPT4o,
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Stream forty tokens.")},
		MaxTokens:     openai.Int(40),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	defer stream.Close()
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for stream.Next() {
		chunk := stream.Current()
		if !acc.AddChunk(chunk) {
			t.Fatalf("the accumulator rejected chunk %d: %s", chunks, chunk.RawJSON())
		}
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if chunks < 4 {
		t.Errorf("%d chunks, want the answer in pieces", chunks)
	}
	if got := acc.Choices[0].Message.Content; got != tokenText(0, 40) {
		t.Errorf("accumulated content %q", got)
	}
	if acc.Usage.PromptTokens != 5 || acc.Usage.CompletionTokens != 40 || acc.Model != "gpt-4o" {
		t.Errorf("accumulated usage %+v model %q", acc.Usage, acc.Model)
	}
}

func TestSDKSeesErrorsAsAPIErrors(t *testing.T) {
	_, client := sdkClient(t, Config{})
	_, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
		Model:    "m",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")},
	}, option.WithHeader(HeaderFault, "429"))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Code != "rate_limit_exceeded" {
		t.Errorf("error %v, want a 429 *openai.Error", err)
	}

	stream := client.Chat.Completions.NewStreaming(t.Context(), openai.ChatCompletionNewParams{
		Model:    "m",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")},
	}, option.WithHeader(HeaderFault, "error"))
	for stream.Next() {
	}
	if !errors.As(stream.Err(), &apiErr) || apiErr.StatusCode != http.StatusInternalServerError {
		t.Errorf("stream error %v, want a 500 *openai.Error", stream.Err())
	}
}

func TestSDKEmbeddings(t *testing.T) {
	_, client := sdkClient(t, Config{})
	for _, format := range []openai.EmbeddingNewParamsEncodingFormat{openai.EmbeddingNewParamsEncodingFormatFloat, openai.EmbeddingNewParamsEncodingFormatBase64} {
		res, err := client.Embeddings.New(t.Context(), openai.EmbeddingNewParams{
			Model:          openai.EmbeddingModelTextEmbedding3Small,
			Input:          openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"abcd", "efgh"}},
			Dimensions:     openai.Int(16),
			EncodingFormat: format,
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Data) != 2 || len(res.Data[1].Embedding) != 16 || res.Usage.PromptTokens != 2 {
			t.Errorf("%s: embeddings %+v", format, res)
		}
	}
}

func TestSDKResponses(t *testing.T) {
	_, client := sdkClient(t, Config{})
	params := responses.ResponseNewParams{
		Model: "gpt-4.1-mini",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("abcdefgh")},
	}
	res, err := client.Responses.New(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	if res.OutputText() != tokenText(0, DefaultOutputTokens) || res.Usage.InputTokens != 2 || res.Usage.OutputTokens != DefaultOutputTokens {
		t.Errorf("response %+v", res)
	}

	stream := client.Responses.NewStreaming(t.Context(), params)
	defer stream.Close()
	var text string
	var final responses.Response
	for stream.Next() {
		switch ev := stream.Current(); ev.Type {
		case "response.output_text.delta":
			text += ev.Delta
		case "response.completed":
			final = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text != tokenText(0, DefaultOutputTokens) || final.Usage.OutputTokens != DefaultOutputTokens || final.OutputText() != text {
		t.Errorf("streamed %q, final %+v", text, final.Usage)
	}
}
