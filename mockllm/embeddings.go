package mockllm

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"hash/fnv"
	"math"
)

// Limits of an embeddings request, as OpenAI documents them.
const (
	maxEmbeddingInputs     = 2048
	maxEmbeddingDimensions = 3072
	// defaultEmbeddingDimensions is text-embedding-3-small's size, used when
	// the request does not ask for a size.
	defaultEmbeddingDimensions = 1536
)

type embeddingsAPI struct{}

type embedRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`

	inputs []string // one string per vector; token-id inputs become ""
}

func (embeddingsAPI) dialect() dialect { return openAI }

func (embeddingsAPI) decode(body []byte, c *call) error {
	req := &c.embed
	if err := decodeJSON(body, req); err != nil {
		return err
	}
	c.model = req.Model
	var v any
	if len(req.Input) == 0 || json.Unmarshal(req.Input, &v) != nil || v == nil {
		return badRequest("input", "required: a string, an array of strings or an array of token arrays")
	}
	// One vector per input: a string, or one element of an array. A flat
	// array of numbers is a single tokenized input.
	switch v := v.(type) {
	case string:
		req.inputs = []string{v}
	case []any:
		if len(v) > 0 {
			if _, ok := v[0].(float64); ok {
				req.inputs = []string{""}
				break
			}
		}
		for _, e := range v {
			s, _ := e.(string)
			req.inputs = append(req.inputs, s)
		}
	default:
		return badRequest("input", "must be a string or an array")
	}
	if len(req.inputs) == 0 || len(req.inputs) > maxEmbeddingInputs {
		return badRequest("input", "must hold between 1 and %d inputs, got %d", maxEmbeddingInputs, len(req.inputs))
	}
	switch req.EncodingFormat {
	case "", "float", "base64":
	default:
		return badRequest("encoding_format", `must be "float" or "base64", got %q`, req.EncodingFormat)
	}
	if d := req.Dimensions; d != nil && (*d < 1 || *d > maxEmbeddingDimensions) {
		return badRequest("dimensions", "must be in [1, %d], got %d", maxEmbeddingDimensions, *d)
	}
	c.promptChars = textChars(req.Input)
	return nil
}

type embedding struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or a base64 string
}

func (embeddingsAPI) body(c *call, _ string) any {
	req := &c.embed
	dims := defaultEmbeddingDimensions
	if req.Dimensions != nil {
		dims = *req.Dimensions
	}
	data := make([]embedding, len(req.inputs))
	for i, in := range req.inputs {
		vec := vector(in, i, dims)
		data[i] = embedding{Object: "embedding", Index: i, Embedding: vec}
		if req.EncodingFormat == "base64" {
			b := make([]byte, 4*len(vec))
			for j, x := range vec {
				binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(x))
			}
			data[i].Embedding = base64.StdEncoding.EncodeToString(b)
		}
	}
	return map[string]any{
		"object": "list",
		"data":   data,
		"model":  c.model,
		"usage":  map[string]int{"prompt_tokens": c.tokensIn, "total_tokens": c.tokensIn},
	}
}

// vector is a deterministic unit vector for an input: the same text always
// embeds the same way, different texts differently, at no real cost.
func vector(text string, index, dims int) []float32 {
	h := fnv.New64a()
	h.Write([]byte(text))
	phase := float64(h.Sum64()%1024) + float64(index)
	vec := make([]float32, dims)
	var norm float64
	for j := range vec {
		x := math.Sin(phase + 0.7*float64(j))
		vec[j] = float32(x)
		norm += x * x
	}
	norm = math.Sqrt(norm)
	for j := range vec {
		vec[j] = float32(float64(vec[j]) / norm)
	}
	return vec
}

// Embeddings are never streamed: the stream events are unused.
func (embeddingsAPI) head(*call) []event          { return nil }
func (embeddingsAPI) delta(*call, string) []event { return nil }
func (embeddingsAPI) tail(*call) []event          { return nil }
func (embeddingsAPI) abort(*call) []event         { return nil }
