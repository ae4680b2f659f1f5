// Package orchestrator is the orchestrator service: the agent loop that makes sessions, tools,
// MCP and memory work together. A turn appends the user's message, builds the context (rolling
// summary extended when messages were evicted, recalled memories, pinned messages, the task
// state, the window), calls the model, runs its tool calls concurrently (filling missing
// required arguments from memory, never overriding given ones; idempotent tools with a key
// derived from session, tool and arguments), stores each step as complete tool-call pairs, and
// publishes turn.finished. Its only state is the task-state and turn records, in Redis or a
// bbolt file, so replicas scale out.
package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/errclass"
	"github.com/hermes-agent/hermes/internal/lease"
	"github.com/hermes-agent/hermes/internal/model"
	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/tokenizer"
	"github.com/hermes-agent/hermes/internal/workpool"
	eventsv1 "github.com/hermes-agent/hermes/proto/hermes/events/v1"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// Request limits.
const (
	maxIDBytes           = 128
	maxTextBytes         = 32 << 10
	maxSystemPromptBytes = 32 << 10
	maxModelNameBytes    = 128
	maxStepsLimit        = 50
	maxTurnTimeout       = 30 * time.Minute
	maxToolGroups        = 32
)

// PublishFunc publishes a turn.finished event; it retries until ctx ends. data is the event's
// protobuf encoding when the caller has it (the one stored in the outbox), nil otherwise.
type PublishFunc func(ctx context.Context, ev *eventsv1.TurnFinished, data []byte) error

// Options are the services and backends the orchestrator works with.
type Options struct {
	Session sessionv1.SessionServiceClient
	Tools   toolsv1.ToolServiceClient
	// Memory is optional: without it turns run without recall.
	Memory memoryv1.MemoryServiceClient
	// Model is nil when no model is configured; turns then fail with FAILED_PRECONDITION.
	Model     Model
	Tokenizer *tokenizer.Tokenizer
	Store     Store
	// Gateway is optional: the MCP gateway, asked for the instructions of the servers named by
	// Config.MCPInstructions and given the answers of AnswerElicitation.
	Gateway Gateway
	// Publish is optional: without it no turn.finished events are sent.
	Publish PublishFunc
	// DeferSessionWrites says that Store shares the session store's file and group commit
	// (the monolith): a turn's session writes are then sent with boltstore.DeferHeader, its
	// RUNNING record is deferred too where Store can (PutTurnDeferred), and all are made durable
	// by the file's next commit, at the latest the turn's end: a quick turn costs one commit.
	DeferSessionWrites bool
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Replica names this process in outbox claims; empty is a random name.
	Replica string
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Model is what the orchestrator needs of a model endpoint; *model.Client is the production
// one, and tests give the loop a fake. A request's message list is the caller's again once the
// call returns (a turn rebuilds it in place for its next step).
type Model interface {
	// Model is the default model name.
	Model() string
	// Complete makes a chat completion.
	Complete(ctx context.Context, req model.Request) (*model.Response, error)
	// Stream makes a streamed chat completion, calling onDelta with each piece of text.
	Stream(ctx context.Context, req model.Request, onDelta func(string)) (*model.Response, error)
}

// Service implements orchestratorv1.OrchestratorServiceServer.
type Service struct {
	orchestratorv1.UnimplementedOrchestratorServiceServer
	deps   Options
	cfg    Config
	log    *slog.Logger
	sum    *summarizer
	tracer trace.Tracer
	met    metrics
	// promptTokens is the configured system prompt's token count, counted once.
	promptTokens int32
	taskLines    taskLines
	now          func() time.Time
	replica      string
	instructions *serverInstructions
	// kick asks the outbox drainer for a round now (capacity one: kicks coalesce).
	kick chan struct{}
	// The outbox drainer runs until Close cancels drainCtx; drained is closed when it stopped.
	drainCtx    context.Context
	drainCancel context.CancelFunc
	drained     chan struct{}
	// swept is closed when the sweep for orphaned turns (sweepOrphans), which also runs until
	// Close cancels drainCtx, stopped.
	swept chan struct{}

	// Background publishes outlive their turns; Close waits for them.
	bgCtx    context.Context
	bgCancel context.CancelFunc
	bg       sync.WaitGroup
	// workers run turns' background work: the RUNNING record's and a step's writes, the
	// gathering's fetches, the turn.finished publish.
	workers *workpool.Pool
}

// turnWorkers is how many workers an orchestrator keeps: a turn runs up to five pieces of
// background work at once, and a replica several turns. 256 gained nothing measured at 64
// turns at once, and more workers keep more grown stacks through a busy spell.
const turnWorkers = 64

// NewService returns the orchestrator.
func NewService(cfg Config, deps Options) (*Service, error) {
	if deps.Session == nil || deps.Tools == nil || deps.Store == nil || deps.Tokenizer == nil {
		return nil, errors.New("orchestrator: the session and tool clients, a store and a tokenizer are required")
	}
	log := deps.Logger
	if log == nil {
		log = slog.Default()
	}
	cfg = cfg.withDefaults()
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Replica == "" {
		deps.Replica = "orchestrator-" + ulid.Make().String()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Service{
		now:      deps.Now,
		replica:  deps.Replica,
		kick:     make(chan struct{}, 1),
		deps:     deps,
		cfg:      cfg,
		log:      log,
		tracer:   otel.Tracer("github.com/hermes-agent/hermes/services/orchestrator"),
		met:      newMetrics(),
		bgCtx:    ctx,
		bgCancel: cancel,
		workers:  workpool.New(turnWorkers),
	}
	s.promptTokens = int32(deps.Tokenizer.CountMessage(cfg.SystemPrompt))
	s.instructions = &serverInstructions{names: cfg.MCPInstructions, servers: deps.Gateway, now: deps.Now, log: log}
	s.sum = &summarizer{model: deps.Model, tok: deps.Tokenizer, cfg: cfg, log: log, now: deps.Now}
	s.drainCtx, s.drainCancel = context.WithCancel(context.Background())
	s.drained = make(chan struct{})
	s.swept = make(chan struct{})
	go s.sweepOrphans()
	if deps.Publish != nil {
		go s.drainOutbox()
	} else {
		close(s.drained)
	}
	return s, nil
}

// Close stops the outbox drainer (what it did not publish stays in the outbox for the next
// start), waits for the publishes of finished turns (each bounded by the publish timeout), and
// cancels what is left after the given grace period.
func (s *Service) Close(grace time.Duration) {
	s.drainCancel()
	<-s.drained
	<-s.swept
	done := make(chan struct{})
	go func() { s.bg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		s.log.Warn("turn.finished publishes still pending at shutdown; cancelling them")
		s.bgCancel()
		<-done
	}
	s.bgCancel()
	s.workers.Stop()
}

// validateRun checks a RunTurn request.
func validateRun(req *orchestratorv1.RunTurnRequest, user string) error {
	var v rpc.Violations
	v.Required("session_id", req.GetSessionId())
	v.MaxLen("session_id", req.GetSessionId(), maxIDBytes)
	if user == "" {
		v.Add("user_id", "is required")
	}
	v.MaxLen("user_id", user, maxIDBytes)
	v.Required("text", req.GetText())
	o := req.GetOptions()
	if n := o.GetMaxSteps(); n < 0 || n > maxStepsLimit {
		v.Add("options.max_steps", "must be between 0 and %d", maxStepsLimit)
	}
	if o.GetTimeout() != nil {
		if err := o.GetTimeout().CheckValid(); err != nil {
			v.Add("options.timeout", "is not a valid duration: %v", err)
		} else if d := o.GetTimeout().AsDuration(); d < 0 || d > maxTurnTimeout {
			v.Add("options.timeout", "must be between 0 and %s", maxTurnTimeout)
		}
	}
	v.MaxLen("options.model", o.GetModel(), maxModelNameBytes)
	if len(o.GetToolGroups()) > maxToolGroups {
		v.Add("options.tool_groups", "has %d groups; at most %d are allowed", len(o.GetToolGroups()), maxToolGroups)
	}
	for i, g := range o.GetToolGroups() {
		if g == "" || len(g) > 64 {
			v.Add(fmt.Sprintf("options.tool_groups[%d]", i), "must be 1 to 64 bytes")
		}
	}
	if err := v.Err(); err != nil {
		return err
	}
	if n := len(req.GetText()); n > maxTextBytes {
		return errclass.Errorf(errclass.Exhausted, "text is %d bytes; at most %d are allowed in one message", n, maxTextBytes)
	}
	if n := len(o.GetSystemPrompt()); n > maxSystemPromptBytes {
		return errclass.Errorf(errclass.Exhausted, "options.system_prompt is %d bytes; at most %d are allowed", n, maxSystemPromptBytes)
	}
	return nil
}

// RunTurn implements OrchestratorServiceServer. Problems found before the turn starts (invalid
// request, no model, a session that is missing or another user's) are the RPC's status; once
// TurnStarted was sent, the stream always ends with TurnCompleted or TurnFailed and an OK status.
func (s *Service) RunTurn(req *orchestratorv1.RunTurnRequest, stream grpc.ServerStreamingServer[orchestratorv1.RunTurnResponse]) error {
	ctx := stream.Context()
	user, err := s.authorize(ctx, req.GetUserId())
	if err != nil {
		return err
	}
	if err := validateRun(req, user); err != nil {
		return err
	}
	if err := s.checkOptions(ctx, req.GetOptions()); err != nil {
		return err
	}
	if s.deps.Model == nil {
		return errclass.New(errclass.Precondition, model.ErrNotConfigured.Error(), nil)
	}
	t := s.newTurn(req, user, func(ev *orchestratorv1.TurnEvent) error {
		return stream.Send(&orchestratorv1.RunTurnResponse{Event: ev})
	})
	ctx, span := s.tracer.Start(ctx, "orchestrator.turn", trace.WithAttributes(
		attribute.String("hermes.turn_id", t.id), attribute.String("hermes.session_id", t.session)))
	defer span.End()
	t.span = span
	// The tools and the memories for the turn depend on the request alone: they are fetched
	// while the session's lease is taken.
	ga := t.gather(ctx)
	defer ga.cancel()
	ctx, hold, err := s.lockSession(ctx, t.session, t.id)
	if err != nil {
		ga.discard()
		span.SetStatus(otelcodes.Error, err.Error())
		return err
	}
	defer hold.release()
	t.hold = hold
	ctx, stopWatch := s.watchCancel(ctx, t.id)
	defer stopWatch()
	return t.run(ctx, ga)
}

// sessionLease is how long a turn's hold on its session lasts without renewal: a replica that
// dies mid-turn (or loses Redis while releasing) blocks the session at most this long.
const sessionLease = 15 * time.Second

// errLeaseLost is the cause of a turn's end when another turn took its session's lease.
var errLeaseLost = errors.New("the session's lease passed to another turn")

// lockSession waits, as long as the caller does, until no other turn of the session runs, then
// holds the session's lease for this turn, renewing it until the hold is released (or handed
// to the turn's end, which the store releases with its writes). A release wakes the next
// waiting turn at once (internal/lease), on this replica or another. The returned context is
// the turn's: it ends with errLeaseLost if a renewal finds the lease taken by another turn (this
// one's renewals failed for a whole lease), so two turns never write one session.
func (s *Service) lockSession(ctx context.Context, session, turnID string) (context.Context, *sessionHold, error) {
	leases := s.deps.Store.Leases()
	key := sessionKey(session)
	// The turns this one waited for may have died holding the lease: once it is this turn's,
	// the last of them is checked (reapLater), so its record does not stay RUNNING.
	var waitedFor string
	c, err := lease.Wait(ctx, leases, key, turnID, nil, sessionLease, func(c lease.Claim) bool {
		waitedFor = c.Owner
		return true
	})
	if err == nil && waitedFor != "" && waitedFor != turnID {
		s.reapLater(waitedFor)
	}
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, nil, status.FromContextError(fmt.Errorf("waiting for turn %s of session %s to finish: %w", c.Owner, session, ctx.Err())).Err()
	case err != nil:
		return nil, nil, fmt.Errorf("taking the session's lease: %w", err)
	}
	turnCtx, lost := context.WithCancelCause(ctx)
	h := &sessionHold{s: s, ctx: ctx, session: session, lease: HeldLease{Key: key, Owner: turnID}, lost: lost}
	h.mu.Lock()
	h.timer = time.AfterFunc(sessionLease/3, h.renew)
	h.mu.Unlock()
	return turnCtx, h, nil
}

// sessionHold is a turn's hold on its session's lease (lockSession). The renewals run on a
// timer rather than a goroutine of the turn's own: most turns end before the first renewal,
// and stopping a timer that has not fired costs the turn's end no hand-off to another
// goroutine and back.
type sessionHold struct {
	s       *Service
	ctx     context.Context
	session string
	lease   HeldLease
	// lost ends the turn's context when a renewal finds the lease taken.
	lost context.CancelCauseFunc

	// mu guards timer, stopped and renewing.
	mu    sync.Mutex
	timer *time.Timer
	// stopped is set by the first stop: no renewal starts after it.
	stopped bool
	// renewing is closed when the renewal under way ends; nil when none is.
	renewing chan struct{}

	// done is set once the lease is released or handed over.
	done atomic.Bool
}

// renew renews the lease (the timer's function) and sets the timer for the next renewal.
// Renewal outlives a cancelled caller until release: the lease must not lapse while the turn
// still finishes its writes.
func (h *sessionHold) renew() {
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	ch := make(chan struct{})
	h.renewing = ch
	h.mu.Unlock()
	defer close(ch)

	rctx, cancel := context.WithTimeout(context.WithoutCancel(h.ctx), sessionLease/3)
	ok, err := h.s.deps.Store.Leases().Renew(rctx, h.lease.Key, h.lease.Owner, sessionLease)
	cancel()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.renewing = nil
	switch {
	case err != nil:
		h.s.log.Warn("session lease not renewed", "session", h.session, "turn", h.lease.Owner, "error", err)
	case !ok:
		h.s.log.Error("session lease lost to another turn; cancelling this one", "session", h.session, "turn", h.lease.Owner)
		h.lost(errLeaseLost)
		return
	}
	if !h.stopped {
		h.timer.Reset(sessionLease / 3)
	}
}

// stop ends the renewals, waiting for one under way, and reports whether the hold was still
// the caller's to end (the first call of release or handOver).
func (h *sessionHold) stop() bool {
	h.mu.Lock()
	if !h.stopped {
		h.stopped = true
		h.timer.Stop()
	}
	ch := h.renewing
	h.mu.Unlock()
	if ch != nil {
		<-ch
	}
	return h.done.CompareAndSwap(false, true)
}

// handOver stops the renewals and gives the lease to the turn's end (Finish.Lease), which the
// store releases with its writes: one round trip less between a turn's end and the next turn.
// It returns nil when the hold was already released.
func (h *sessionHold) handOver() *HeldLease {
	if !h.stop() {
		return nil
	}
	l := h.lease
	return &l
}

// release ends the hold (releasing the lease) unless it was released or handed over.
func (h *sessionHold) release() {
	if h.stop() {
		h.s.releaseLease(h.ctx, h.lease)
	}
}

// releaseLease releases a session lease, bounded by storeTimeout even when ctx has ended.
func (s *Service) releaseLease(ctx context.Context, l HeldLease) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	if _, err := s.deps.Store.Leases().Release(rctx, l.Key, l.Owner); err != nil {
		s.log.Warn("session lease not released; it expires by itself", "lease", l.Key, "turn", l.Owner, "after", sessionLease, "error", err)
	}
}

// GetTurn implements OrchestratorServiceServer.
func (s *Service) GetTurn(ctx context.Context, req *orchestratorv1.GetTurnRequest) (*orchestratorv1.GetTurnResponse, error) {
	user, err := s.authorize(ctx, req.GetUserId())
	if err != nil {
		return nil, err
	}
	var v rpc.Violations
	validateRef(&v, "turn_id", req.GetTurnId(), user)
	if err := v.Err(); err != nil {
		return nil, err
	}
	t, err := s.ownTurn(ctx, req.GetTurnId(), user)
	if err != nil {
		return nil, err
	}
	return &orchestratorv1.GetTurnResponse{Turn: t}, nil
}

// validateRef checks the id a request names (field) and the user it runs for.
func validateRef(v *rpc.Violations, field, id, user string) {
	v.Required(field, id)
	v.MaxLen(field, id, maxIDBytes)
	if user == "" {
		v.Add("user_id", "is required")
	}
	v.MaxLen("user_id", user, maxIDBytes)
}

// peerStatus re-labels another service's error with the service's name, keeping its class (read
// back by rpc.ClassOf; Classify sends it with the code it came with). An error of no class (a
// bug in the other service, a cancelled call) keeps its status: Classify passes it through.
func peerStatus(service string, err error) error {
	st := status.Convert(err)
	msg := service + " service: " + st.Message()
	switch class := rpc.ClassOf(err); class {
	case nil, context.Canceled, context.DeadlineExceeded:
		return status.Error(st.Code(), msg)
	default:
		return errclass.New(class, msg, err)
	}
}
