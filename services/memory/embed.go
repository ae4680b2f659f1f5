package memory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hermes-agent/hermes/internal/model"
)

// Embedder turns texts into vectors. Vectors of one embedder are compared by cosine similarity.
type Embedder interface {
	// Name identifies the embedder and its dimension, for example "lexical-hash-1024".
	Name() string
	// Dimension is the length of every vector.
	Dimension() int
	// Embed returns one vector per text.
	Embed(ctx context.Context, texts []string) ([][]float32, error)
	// Lexical reports whether similarity is lexical overlap rather than meaning, which needs
	// its own thresholds.
	Lexical() bool
}

// OpenAIEmbedder calls an OpenAI-compatible /v1/embeddings endpoint, with the model client's
// transport (retries, timeouts, errors).
type OpenAIEmbedder struct {
	ep    *model.Endpoint
	model string
	dim   int
	base  string
}

// OpenAIEmbedderConfig configures NewOpenAIEmbedder.
type OpenAIEmbedderConfig struct {
	// BaseURL of the endpoint, for example https://api.openai.com/v1.
	BaseURL string
	// APIKey is sent as a bearer token; empty sends none.
	APIKey string
	// Model is the embedding model.
	Model string
	// Dimensions is the vector size; 0 asks the endpoint once.
	Dimensions int
}

// NewOpenAIEmbedder returns an embedder for the endpoint. With Dimensions 0 it embeds a probe
// text to learn the size, so a wrong URL or model fails at start-up, not at the first turn.
func NewOpenAIEmbedder(ctx context.Context, cfg OpenAIEmbedderConfig) (*OpenAIEmbedder, error) {
	if cfg.BaseURL == "" || cfg.Model == "" {
		return nil, errors.New("embedder: base URL and model are required")
	}
	// The process's pool of model connections (the nil HTTPClient), shared with the chat and
	// extraction models.
	ep := model.NewEndpoint(model.Config{BaseURL: cfg.BaseURL, APIKey: cfg.APIKey})
	e := &OpenAIEmbedder{ep: ep, model: cfg.Model, dim: cfg.Dimensions, base: cfg.BaseURL}
	if e.dim == 0 {
		v, err := e.Embed(ctx, []string{"dimension probe"})
		if err != nil {
			return nil, fmt.Errorf("embedder %s at %s: %w", cfg.Model, cfg.BaseURL, err)
		}
		e.dim = len(v[0])
	}
	return e, nil
}

// Name implements Embedder.
func (e *OpenAIEmbedder) Name() string { return fmt.Sprintf("openai:%s-%d", e.model, e.dim) }

// Dimension implements Embedder.
func (e *OpenAIEmbedder) Dimension() int { return e.dim }

// Lexical implements Embedder.
func (e *OpenAIEmbedder) Lexical() bool { return false }

// Embed implements Embedder.
func (e *OpenAIEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if len(texts) == 0 {
		return nil, nil
	}
	body, err := json.Marshal(embeddingRequest{Model: e.model, Input: texts, EncodingFormat: "float"})
	if err != nil {
		return nil, fmt.Errorf("embeddings: encoding the request: %w", err)
	}
	var resp embeddingResponse
	if _, err := e.ep.PostJSON(ctx, "embeddings", body, &resp); err != nil {
		return nil, fmt.Errorf("embeddings at %s: %w", e.base, err)
	}
	if len(resp.Data) != len(texts) {
		return nil, fmt.Errorf("embeddings at %s: %d vectors for %d texts", e.base, len(resp.Data), len(texts))
	}
	out := make([][]float32, len(texts))
	for _, d := range resp.Data {
		if d.Index < 0 || int(d.Index) >= len(texts) {
			return nil, fmt.Errorf("embeddings at %s: index %d out of range", e.base, d.Index)
		}
		v := make([]float32, len(d.Embedding))
		for i, f := range d.Embedding {
			v[i] = float32(f)
		}
		if e.dim != 0 && len(v) != e.dim {
			return nil, fmt.Errorf("embeddings at %s: vector of size %d, want %d (set --memory.embed-dimensions to the model's size)", e.base, len(v), e.dim)
		}
		out[d.Index] = normalize(v)
	}
	for i, v := range out {
		if v == nil {
			return nil, fmt.Errorf("embeddings at %s: no vector for text %d", e.base, i)
		}
	}
	return out, nil
}

// The embeddings request and answer, with only the fields used here.
type (
	embeddingRequest struct {
		Model          string   `json:"model"`
		Input          []string `json:"input"`
		EncodingFormat string   `json:"encoding_format"`
	}
	embeddingResponse struct {
		Data []struct {
			Index     int64     `json:"index"`
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
	}
)
