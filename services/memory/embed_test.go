package memory

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// hashedVectors are bag-of-terms vectors hashed into dim components, unit length: a stand-in for
// an embedding model's vectors in tests (texts sharing words are similar; it is no model).
func hashedVectors(texts []string, dim int) [][]float32 {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		v := make([]float32, dim)
		lexTerms(t, func(term string, w float64) { v[lexTermID(term)%uint32(dim)] += float32(w) })
		if len(texts[i]) > 0 && len(v) > 0 {
			v[0] += 0.01 // never the zero vector
		}
		out[i] = normalize(v)
	}
	return out
}

// embeddingsServer is a real OpenAI-compatible /v1/embeddings endpoint over HTTP whose vectors
// are hashedVectors (it stands in for an embedding model; it is not one). It answers in reverse
// order to check that the client orders by index.
func embeddingsServer(t *testing.T, dim int, calls *atomic.Int64) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.URL.Path != "/v1/embeddings" || r.Header.Get("Authorization") != "Bearer k" {
			http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
			return
		}
		var req struct {
			Model string   `json:"model"`
			Input []string `json:"input"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Model != "embed-test" {
			http.Error(w, `{"error":{"message":"bad body"}}`, http.StatusBadRequest)
			return
		}
		vecs := hashedVectors(req.Input, dim)
		var data []map[string]any
		for i := len(vecs) - 1; i >= 0; i-- {
			data = append(data, map[string]any{"object": "embedding", "index": i, "embedding": vecs[i]})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "model": req.Model, "usage": map[string]int{"prompt_tokens": 1, "total_tokens": 1}})
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestOpenAIEmbedder(t *testing.T) {
	var calls atomic.Int64
	srv := embeddingsServer(t, 128, &calls)
	ctx := context.Background()
	e, err := NewOpenAIEmbedder(ctx, OpenAIEmbedderConfig{BaseURL: srv.URL + "/v1", APIKey: "k", Model: "embed-test"})
	if err != nil {
		t.Fatal(err)
	}
	if e.Dimension() != 128 || calls.Load() != 1 || e.Name() != "openai:embed-test-128" || e.Lexical() {
		t.Errorf("probe: dim %d, %d calls, name %s", e.Dimension(), calls.Load(), e.Name())
	}
	texts := []string{"用户喜欢川菜", "User likes tea", "用户喜欢川菜"}
	got, err := e.Embed(ctx, texts)
	if err != nil {
		t.Fatal(err)
	}
	want := hashedVectors(texts, 128)
	if d := cmp.Diff(want, got, cmp.Comparer(func(a, b float32) bool { return a-b < 1e-6 && b-a < 1e-6 })); d != "" {
		t.Errorf("vectors out of order or changed (-want +got):\n%s", d)
	}
	// A configured dimension that the model does not produce is a clear error.
	e2, err := NewOpenAIEmbedder(ctx, OpenAIEmbedderConfig{BaseURL: srv.URL + "/v1", APIKey: "k", Model: "embed-test", Dimensions: 64})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e2.Embed(ctx, texts); err == nil || !strings.Contains(err.Error(), "vector of size 128, want 64") {
		t.Errorf("dimension mismatch: %v", err)
	}
	// A wrong model or key fails at start-up.
	if _, err := NewOpenAIEmbedder(ctx, OpenAIEmbedderConfig{BaseURL: srv.URL + "/v1", APIKey: "wrong", Model: "embed-test"}); err == nil {
		t.Errorf("a rejected probe did not fail")
	}
}

func TestEmbedderDimensionChecks(t *testing.T) {
	t.Run("qdrant collection of another size", func(t *testing.T) {
		c, coll := testQdrant(t)
		if _, err := NewQdrantSemantic(context.Background(), c, coll, 64); err != nil {
			t.Fatal(err)
		}
		_, err := NewQdrantSemantic(context.Background(), c, coll, 128)
		if err == nil || !strings.Contains(err.Error(), "holds vectors of size 64 but the embedder produces 128") {
			t.Errorf("error = %v", err)
		}
	})
	t.Run("bolt file of another embedder", func(t *testing.T) {
		path := t.TempDir() + "/m.db"
		s, err := OpenBoltStore(path, BoltOptions{Embedder: "lexical-hash-64", Dimension: 64})
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
		_, err = OpenBoltStore(path, BoltOptions{Embedder: "openai:x-1536", Dimension: 1536})
		if err == nil || !strings.Contains(err.Error(), "holds vectors of embedder lexical-hash-64/64") {
			t.Errorf("error = %v", err)
		}
	})
	t.Run("bolt file in use", func(t *testing.T) {
		path := t.TempDir() + "/m.db"
		s, err := OpenBoltStore(path, BoltOptions{Embedder: "e", Dimension: 64})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		_, err = OpenBoltStore(path, BoltOptions{Embedder: "e", Dimension: 64})
		if err == nil || !strings.Contains(err.Error(), "another hermes process") {
			t.Errorf("second open: %v", err)
		}
	})
}
