package app

import (
	"context"
	"fmt"
	"time"

	"github.com/hermes-agent/hermes/internal/model"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	"github.com/hermes-agent/hermes/services/memory"
)

// initMemory registers the memory service: Redis (episodic tier, counters, turn records, lock)
// and Qdrant (semantic tier) when configured, otherwise the embedded bbolt store with its
// in-process vector index; the embedder of HERMES_EMBED_BASE_URL or the lexical hashing
// embedder; the extraction model of HERMES_MODEL_BASE_URL (HERMES_EXTRACT_MODEL, else
// HERMES_MODEL); and the NATS consumer of turn.finished.
func (a *App) initMemory(ctx context.Context) error {
	cfg := a.cfg.Memory
	name := memoryv1.MemoryService_ServiceDesc.ServiceName
	emb, err := a.memoryEmbedder(ctx)
	if err != nil {
		return err
	}
	opts := memory.Options{Embedder: emb, Logger: a.log.With("service", "memory")}
	rdb, err := a.Redis(ctx)
	if err != nil {
		return err
	}
	if (rdb == nil) != (a.cfg.QdrantAddr == "") {
		return fmt.Errorf("memory needs both Redis (--redis-url) and Qdrant (--qdrant-addr), or neither for the embedded store")
	}
	if rdb != nil {
		prefix := a.cfg.RedisPrefix + "memory:"
		opts.Episodic = memory.NewRedisEpisodic(rdb, prefix, cfg.EpisodicTTL, emb.Dimension())
		opts.State = memory.NewRedisState(rdb, prefix)
		qc, err := memory.DialQdrant(a.cfg.QdrantAddr, memory.QdrantDialOptions{APIKey: a.cfg.QdrantAPIKey, TLS: a.cfg.QdrantTLS})
		if err != nil {
			return err
		}
		a.onClose(func() { _ = qc.Close() })
		qctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		sem, err := memory.NewQdrantSemantic(qctx, qc, cfg.QdrantCollection, emb.Dimension())
		cancel()
		if err != nil {
			return err
		}
		opts.Semantic = sem
		a.watchRedis(name, rdb)
		a.srv.WatchDependency("qdrant/"+name, []string{name}, 2*time.Second, sem.Ping)
	} else {
		bs, err := openInDataDir(a, "memory.db", func(path string) (*memory.BoltStore, error) {
			return memory.OpenBoltStore(path, memory.BoltOptions{EpisodicTTL: cfg.EpisodicTTL, Embedder: emb.Name(), Dimension: emb.Dimension()})
		})
		if err != nil {
			return err
		}
		opts.Episodic, opts.Semantic, opts.State = bs.Episodic(), bs.Semantic(), bs
	}

	if a.cfg.ModelBaseURL != "" {
		m := a.cfg.ExtractModel
		if m == "" {
			m = a.cfg.Model
		}
		mc, err := model.New(model.Config{BaseURL: a.cfg.ModelBaseURL, APIKey: a.cfg.APIKey(a.getenv), Model: m})
		if err != nil {
			return err
		}
		opts.Model = mc
	} else {
		a.log.Warn("memory: no model configured; ExtractTurn and the turn.finished consumer fail until HERMES_MODEL_BASE_URL is set")
	}

	svc, err := memory.NewService(cfg, opts)
	if err != nil {
		return err
	}
	a.onClose(svc.Close)
	a.srv.Register(&memoryv1.MemoryService_ServiceDesc, svc)
	svc.StartMaintenance()
	a.log.Info("memory service", "embedder", svc.EmbedderName(), "redis", rdb != nil, "qdrant", a.cfg.QdrantAddr)
	return a.startExtraction(ctx, svc, opts.Model != nil)
}

// memoryEmbedder is the configured embedding model, else the lexical embedder.
func (a *App) memoryEmbedder(ctx context.Context) (memory.Embedder, error) {
	cfg := a.cfg.Memory
	if a.cfg.EmbedBaseURL == "" {
		return memory.NewLexicalEmbedder(cfg.LexicalDimensions), nil
	}
	ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return memory.NewOpenAIEmbedder(ectx, memory.OpenAIEmbedderConfig{
		BaseURL: a.cfg.EmbedBaseURL, APIKey: a.cfg.APIKey(a.getenv), Model: a.cfg.EmbedModel, Dimensions: cfg.EmbedDimensions,
	})
}

// startExtraction starts the turn.finished consumer that extracts memories, when enabled and a
// model can do it.
func (a *App) startExtraction(ctx context.Context, svc *memory.Service, haveModel bool) error {
	cfg := a.cfg.Memory
	name := memoryv1.MemoryService_ServiceDesc.ServiceName
	switch {
	case !cfg.ConsumerEnabled:
	case !haveModel:
		// Without a model every event would fail and be dead-lettered; leave them in the stream
		// for a replica that has one.
		a.log.Warn("memory: turn.finished consumer not started: no extraction model configured")
	default:
		keys, err := a.EventKeys()
		if err != nil {
			return err
		}
		nc, js, err := a.NATS(ctx)
		if err != nil {
			return err
		}
		a.watchNATS(name, nc)
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		cons, err := memory.StartConsumer(cctx, svc, js, a.EventNames(), keys, a.log.With("service", "memory"))
		cancel()
		if err != nil {
			return err
		}
		// Registered after the service's Close, so it runs before it: stop consuming first.
		a.onClose(func() { cons.Stop(10 * time.Second) })
	}
	return nil
}
