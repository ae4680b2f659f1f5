package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	bolt "go.etcd.io/bbolt"

	"github.com/hermes-agent/hermes/internal/boltstore"
	"github.com/hermes-agent/hermes/internal/events"
	"github.com/hermes-agent/hermes/internal/model"
	eventsv1 "github.com/hermes-agent/hermes/proto/hermes/events/v1"
	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
	"github.com/hermes-agent/hermes/services/orchestrator"
)

// initOrchestrator registers the orchestrator: clients of the session, tool and (when
// reachable) memory services, the model of HERMES_MODEL_BASE_URL / HERMES_MODEL (without one,
// RunTurn answers FAILED_PRECONDITION), turn.finished published on NATS, and its task-state and
// turn records in Redis when a Redis URL is set, else in orchestrator.db in the data directory.
func (a *App) initOrchestrator(ctx context.Context) error {
	cfg := a.cfg.Orchestrator
	log := a.log.With("service", "orchestrator")
	sessConn, err := a.Conn(TargetSession)
	if err != nil {
		return err
	}
	toolsConn, err := a.Conn(TargetTools)
	if err != nil {
		return err
	}
	deps := orchestrator.Options{
		Session: sessionv1.NewSessionServiceClient(sessConn),
		Tools:   toolsv1.NewToolServiceClient(toolsConn),
		Logger:  log,
	}
	switch gwConn, err := a.Conn(TargetMCPGateway); {
	case err == nil:
		deps.Gateway = mcpgatewayv1.NewMCPGatewayServiceClient(gwConn)
	case len(cfg.MCPInstructions) > 0:
		return fmt.Errorf("--orchestrator.mcp-instructions needs the MCP gateway: %w", err)
	default:
		log.Warn("answers to MCP servers' requests for input cannot be delivered", "reason", err)
	}
	if memConn, err := a.Conn(TargetMemory); err != nil {
		log.Warn("turns run without memory", "reason", err)
	} else {
		deps.Memory = memoryv1.NewMemoryServiceClient(memConn)
	}

	mc, err := model.New(model.Config{
		BaseURL: a.cfg.ModelBaseURL, APIKey: a.cfg.APIKey(a.getenv), Model: a.cfg.Model,
		MaxRetries: retriesFlag(cfg.ModelRetries), Timeout: cfg.ModelTimeout,
	})
	switch {
	case errors.Is(err, model.ErrNotConfigured):
		log.Warn("no model configured: RunTurn fails with FAILED_PRECONDITION until HERMES_MODEL_BASE_URL is set")
	case err != nil:
		return err
	default:
		deps.Model = mc
		log.Info("model endpoint", "base_url", mc.BaseURL(), "model", mc.Model())
	}

	if deps.Tokenizer, err = a.Tokenizer(); err != nil {
		return err
	}
	rdb, err := a.Redis(ctx)
	if err != nil {
		return err
	}
	if rdb != nil {
		st := orchestrator.NewRedisStore(rdb, a.cfg.RedisPrefix+"orchestrator:", log)
		a.onClose(func() { _ = st.Close() })
		deps.Store = st
		a.watchRedis(orchestratorv1.OrchestratorService_ServiceDesc.ServiceName, rdb)
	} else if a.sessionFiles != nil {
		if deps.Store, err = a.orchestratorInSessionFile(log); err != nil {
			return err
		}
		deps.DeferSessionWrites = true
	} else if deps.Store, err = openInDataDir(a, "orchestrator.db", orchestrator.OpenBoltStore); err != nil {
		return err
	}

	keys, err := a.EventKeys()
	if err != nil {
		return err
	}
	nc, js, err := a.NATS(ctx)
	if err != nil {
		return err
	}
	names := a.EventNames()
	deps.Publish = func(ctx context.Context, ev *eventsv1.TurnFinished, data []byte) error {
		return events.PublishTurnFinished(ctx, js, names, ev, events.SignWith(keys), events.Encoded(data))
	}

	svc, err := orchestrator.NewService(cfg, deps)
	if err != nil {
		return err
	}
	// Registered after NATS, so it runs before NATS is drained: pending publishes finish first.
	a.onClose(func() { svc.Close(a.cfg.ShutdownTimeout) })
	// Events that could not be published while NATS was away go out when it is back.
	reconnected := nc.Opts.ReconnectedCB
	nc.SetReconnectHandler(func(c *nats.Conn) {
		if reconnected != nil {
			reconnected(c)
		}
		svc.DrainOutbox()
	})
	a.srv.Register(&orchestratorv1.OrchestratorService_ServiceDesc, svc)
	return a.initEdge()
}

// orchestratorInSessionFile keeps the orchestrator's records of each session in its session file,
// with the file's group commit, so that a turn's session writes and its records share commits
// (two per turn; Options.DeferSessionWrites). The records of an orchestrator.db of an earlier
// version are moved into the first file (an earlier version's data directory has one).
func (a *App) orchestratorInSessionFile(log *slog.Logger) (orchestrator.Store, error) {
	db, g := a.sessionFiles[0].File()
	old, err := a.dataPath("orchestrator.db")
	if err != nil {
		return nil, err
	}
	moved, err := boltstore.MoveInto(g, old)
	if err != nil {
		return nil, fmt.Errorf("orchestrator records: %w", err)
	}
	if moved {
		log.Info("orchestrator records moved into session.db", "from", old, "renamed_to", old+".moved")
	}
	if len(a.sessionFiles) == 1 {
		st, err := orchestrator.OpenBoltStoreOn(db, g)
		if err != nil {
			return nil, err
		}
		a.onClose(func() { _ = st.Close() })
		return st, nil
	}
	dbs := make([]*bolt.DB, len(a.sessionFiles))
	groups := make([]*boltstore.Group, len(a.sessionFiles))
	for i, f := range a.sessionFiles {
		dbs[i], groups[i] = f.File()
	}
	st, err := orchestrator.OpenBoltFilesOn(dbs, groups)
	if err != nil {
		return nil, err
	}
	a.onClose(func() { _ = st.Close() })
	return st, nil
}

// retriesFlag maps the flag (0 means no retries) to model.Config (0 means the default).
func retriesFlag(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}
