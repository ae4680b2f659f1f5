package orchestrator

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/hermes-agent/hermes/internal/boltstore"
	"github.com/hermes-agent/hermes/internal/errclass"
	"github.com/hermes-agent/hermes/internal/model"
	"github.com/hermes-agent/hermes/internal/rpc"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

const (
	// storeTimeout bounds writes made after the turn's own context ended, so that what the turn
	// did is stored consistently even when the client went away.
	storeTimeout = 10 * time.Second
	// maxSummaryRounds bounds how many batches of evicted messages one turn folds in.
	maxSummaryRounds = 4
	// resultPreviewRunes is the key result kept in the task state.
	resultPreviewRunes = 120
	// outputPreviewRunes is the output shown in ToolCallFinished events.
	outputPreviewRunes = 2000
	maxPending         = 10
)

// turnError ends a turn with a status code and a message for a person; closing, when set, is
// stored as the assistant's last message so the session shows why the turn stopped.
type turnError struct {
	code    codes.Code
	msg     string
	closing string
}

func (e *turnError) Error() string { return e.msg }

// turn is one running turn.
type turn struct {
	s       *Service
	id      string
	session string
	user    string
	text    string
	opts    *orchestratorv1.TurnOptions
	model   string
	steps   int32
	em      *emitter
	started time.Time
	span    trace.Span

	// hold is the turn's hold on its session (lockSession): handed to the store with the turn's
	// end, which releases it with its writes, before the final event, so the session's next
	// turn can start at once.
	hold *sessionHold
	// hadPending is whether the task state had pending items when the turn started.
	hadPending bool

	userMsg *sessionv1.Message
	// built is the context the user message's append returned (nil from a session service
	// that does not build it there); buildContext starts from it.
	built    *sessionv1.BuildContextResponse
	stored   []*sessionv1.Message
	memories []*memoryv1.RecalledMemory
	memText  string
	tools    []*toolsv1.Tool
	byName   map[string]*toolsv1.Tool
	mtools   []model.Tool
	blocks   contextBlocks
	// request is the model request's message list, rebuilt in place for each step: a step's
	// call is over before the next builds it, and the client keeps none of it.
	request  []model.Message
	ctxInfo  *orchestratorv1.ContextAssembled
	usage    usageAcc
	answer   string
	answered *sessionv1.Message

	// mu guards the fields below but lastStep (the turn goroutine's own), and stored and usage
	// above; the turn's tool calls run concurrently. It is never held while em.mu is taken
	// (record copies under mu, then asks the emitter).
	mu        sync.Mutex
	toolCalls []*orchestratorv1.ToolCallRecord
	// done are the successful tool calls, for the task state, stored with the turn's end.
	done []Step
	// lastStep is the current-turn messages of the latest tool step and its calls' ids, which
	// stay the provider's until the next step is added (see runTools).
	lastStep stepIDs
	// storing, when not nil, waits for the write of the latest tool step, which runs while the
	// next model call is made (runTools, awaitStep); held is that write while it waits for the
	// answer to be stored with it. Both are the turn goroutine's own.
	storing func() error
	held    *heldStep
	// failures counts, per tool and error code, the failures in a row.
	failures map[string]int
	// unresolved holds this turn's failed calls whose tool did not succeed afterwards.
	unresolved map[string]string
	// fillDecisions caches the decision model's answers of this turn, by argument and
	// remembered values.
	fillDecisions map[string]fillDecision

	// applied is closed when the RUNNING record is in the store's order of writes, so that what
	// the turn writes next lands after it: stored, or, deferred into the file's open
	// transaction (recordDeferred), applied there. recorded is closed when the record is on
	// disk (the same moment when not deferred), released when the events held back until then
	// were sent. applyErr, set before applied is closed, and recordErr, set before recorded is,
	// are the turn's error if the write failed (storeRecord).
	applied, recorded, released chan struct{}
	applyErr, recordErr         error
}

func (s *Service) newTurn(req *orchestratorv1.RunTurnRequest, user string, send func(*orchestratorv1.TurnEvent) error) *turn {
	t := &turn{
		s:          s,
		id:         ulid.MustNew(ulid.Now(), rand.Reader).String(),
		session:    req.GetSessionId(),
		user:       user,
		text:       req.GetText(),
		opts:       req.GetOptions(),
		em:         &emitter{sendFn: send},
		started:    s.now(),
		failures:   map[string]int{},
		unresolved: map[string]string{},
		ctxInfo:    &orchestratorv1.ContextAssembled{},
	}
	t.model = t.opts.GetModel()
	if t.model == "" {
		t.model = s.deps.Model.Model()
	}
	return t
}

func (t *turn) maxSteps() int32 {
	if n := t.opts.GetMaxSteps(); n > 0 {
		return n
	}
	return int32(t.s.cfg.MaxSteps)
}

func (t *turn) timeout() time.Duration {
	if d := t.opts.GetTimeout(); d != nil && d.AsDuration() > 0 {
		return d.AsDuration()
	}
	return t.s.cfg.TurnTimeout
}

// detached is a context for writes that must happen even though the turn's context ended.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
}

// run executes the turn under its session's lease: the user message first (errors there are the
// RPC's status), then the loop, then the consistent end (pending items, turn record, event). ga
// is the gathering started before the lease was taken.
func (t *turn) run(parent context.Context, ga *gathering) error {
	span := t.span
	ctx, cancel := context.WithTimeout(parent, t.timeout())
	defer cancel()

	// The gathering ends with the turn (its timeout, a cancellation, a lost lease). The session's
	// task state is read now that this turn holds the lease: the previous turn's end is in it.
	// An append that fails discards the gathering (it is the caller's own: memories, the
	// session's task state, tools).
	stop := context.AfterFunc(ctx, ga.cancel)
	defer stop()
	ga.loadTaskState(t)
	// Deferred where the store shares the session's file: the commit that puts the RUNNING
	// record below on disk makes the message durable too, before the client hears of the turn.
	resp, err := t.s.deps.Session.AppendMessages(t.sessionWrite(ctx), &sessionv1.AppendMessagesRequest{
		SessionId: t.session,
		UserId:    t.user,
		Messages: []*sessionv1.NewMessage{{
			Role:     sessionv1.Role_ROLE_USER,
			Kind:     sessionv1.MessageKind_MESSAGE_KIND_TEXT,
			Content:  t.text,
			Sticky:   t.opts.GetSticky(),
			ClientId: t.id + ":user",
			Metadata: map[string]string{"turn_id": t.id},
		}},
		// The context is built in the same call: one round trip to the session service less.
		BuildContext: t.contextRequest(),
	})
	if err != nil {
		ga.discard()
		span.SetStatus(otelcodes.Error, err.Error())
		return peerStatus("session", err)
	}
	t.userMsg = resp.GetMessages()[0]
	t.built = resp.GetContext()
	t.stored = append(t.stored, t.userMsg)
	started := &orchestratorv1.TurnEvent{Event: &orchestratorv1.TurnEvent_Started{Started: &orchestratorv1.TurnStarted{
		TurnId: t.id, SessionId: t.session, UserMessageSeq: t.userMsg.GetSeq(), Model: t.model, UserId: t.user,
	}}}
	// The RUNNING record (with TurnStarted in it) is on disk before the client learns the
	// turn's id: GetTurn and CancelTurn then always find the turn, and if this process dies, the
	// sweep for orphaned turns finds it and ends it as INTERRUPTED (orphans.go). Its write runs
	// while the turn goes on with its first model call: the events wait for it to be on disk,
	// and so does a tool that may act (awaitRecord); a step's write and the turn's end come
	// after it (awaitApplied). In the monolith it is deferred (storeRecord).
	t.em.holdBack(started)
	t.storeRecord(ctx, t.record(orchestratorv1.TurnStatus_TURN_STATUS_RUNNING))

	err = t.loop(ctx, ga)
	t.finish(ctx, err)
	return nil
}

// deferredRecorder is a Store that can write a turn's RUNNING record into the open transaction
// of the file it shares with the session store (BoltStore).
type deferredRecorder interface {
	PutTurnDeferred(turn *orchestratorv1.Turn, ttl time.Duration) (durable <-chan error, err error)
	SyncTurns(sessionID string)
}

// recordDeferred returns the store as a deferredRecorder when the turn's session writes are
// deferred into the same file (Options.DeferSessionWrites): only then is a step written after a
// deferred record committed with it or after it.
func (t *turn) recordDeferred() (deferredRecorder, bool) {
	d, ok := t.s.deps.Store.(deferredRecorder)
	return d, ok && t.s.deps.DeferSessionWrites
}

// storeRecord writes the RUNNING record rec while the turn goes on, then sends the events held
// back until it is on disk. If the write fails the turn fails (awaitApplied, awaitRecord): no
// tool of a turn that a crash would leave without a record may run, since nothing would then
// end it as INTERRUPTED. Where the record is deferred, the commit that puts it on disk is the
// next one of the file: the turn's end, when the turn is quick, makes one commit instead of two;
// a tool that acts on the world first commits it (awaitRecord).
func (t *turn) storeRecord(ctx context.Context, rec *orchestratorv1.Turn) {
	t.applied, t.recorded, t.released = make(chan struct{}), make(chan struct{}), make(chan struct{})
	t.s.workers.Go(func() {
		defer close(t.released)
		rctx, cancel := detached(ctx)
		defer cancel()
		if err := t.putRecord(rctx, rec); err != nil {
			t.s.log.Warn("turn record not stored", "turn", t.id, "error", err)
			t.recordErr = recordError()
		}
		// The turn goes on before the held events are sent: what it emits meanwhile is queued
		// behind them (the emitter holds until release).
		close(t.recorded)
		t.em.release()
	})
}

// recordError is the turn's error when its record could not be stored: without the cause in
// the chain, as a write that timed out is not the turn's deadline. Its message says what the
// client can do (TestRedisRestartUnderLoad once saw a turn fail with only "could not be stored",
// its store's connection cut by the restart).
func recordError() error {
	return errclass.New(errclass.Unavailable, "the turn's record could not be stored: the turn store is unavailable; retry later", nil)
}

// putRecord writes rec, closing t.applied once it is in the store's order of writes (with
// t.applyErr set if it is not), and returns when it is on disk.
func (t *turn) putRecord(ctx context.Context, rec *orchestratorv1.Turn) error {
	d, ok := t.recordDeferred()
	if !ok {
		err := t.s.deps.Store.PutTurn(ctx, rec, t.s.cfg.TurnRetention)
		if err != nil {
			t.applyErr = recordError()
		}
		close(t.applied)
		return err
	}
	durable, err := d.PutTurnDeferred(rec, t.s.cfg.TurnRetention)
	if err != nil {
		t.applyErr = recordError()
		close(t.applied)
		return err
	}
	close(t.applied)
	select {
	case err := <-durable:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// awaitApplied waits until the RUNNING record is in the store's order of writes (or ctx ended)
// and returns its error: what the turn stores next then lands after it.
func (t *turn) awaitApplied(ctx context.Context) error { return await(ctx, t.applied, &t.applyErr) }

// awaitRecord waits until the RUNNING record is on disk (or ctx ended) and returns its error;
// a deferred record is committed at once rather than when the file's next commit comes.
func (t *turn) awaitRecord(ctx context.Context) error {
	select {
	case <-t.recorded:
		return t.recordErr
	default:
	}
	if err := t.awaitApplied(ctx); err != nil {
		return err
	}
	if d, ok := t.recordDeferred(); ok {
		d.SyncTurns(t.session)
	}
	return await(ctx, t.recorded, &t.recordErr)
}

// await waits until done is closed (or ctx ended) and returns *err, which is set before done is
// closed. A closed done wins over an ended ctx.
func await(ctx context.Context, done <-chan struct{}, err *error) error {
	select {
	case <-done:
		return *err
	default:
	}
	select {
	case <-done:
		return *err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// loop prepares the context and runs model steps until a final answer.
func (t *turn) loop(ctx context.Context, ga *gathering) error {
	if err := t.prepare(ctx, ga); err != nil {
		return err
	}
	for step := int32(1); ; step++ {
		if step > t.maxSteps() {
			msg := fmt.Sprintf("the model took %d steps without a final answer (the step limit is %d)", t.maxSteps(), t.maxSteps())
			return &turnError{code: codes.ResourceExhausted, msg: msg, closing: "I stopped: " + msg + "."}
		}
		t.steps = step
		final, err := t.step(ctx, step)
		if err != nil || final {
			return err
		}
	}
}

// step makes one model call and, when it asks for tools, runs them and stores the step. It
// reports whether the turn has its final answer.
func (t *turn) step(ctx context.Context, step int32) (bool, error) {
	t.request = t.blocks.appendMessages(t.request[:0])
	msgs := t.request
	a := &announcement{t: t, step: step}
	if t.storing == nil {
		_ = a.emit() // nothing to wait for: it cannot fail
	}
	resp, err := t.callModel(ctx, step, msgs, a)
	if err != nil {
		return false, err
	}
	tokens := a.tokens
	// The tokenizer counts only what the provider did not report.
	completion := 0
	if !resp.Usage.Reported {
		completion = t.s.deps.Tokenizer.Count(resp.Content)
		for _, c := range resp.ToolCalls {
			completion += t.s.deps.Tokenizer.Count(c.Name) + t.s.deps.Tokenizer.Count(c.Arguments)
		}
	}
	t.mu.Lock()
	t.usage.add(resp.Usage, int(tokens.GetTotal()), completion)
	t.mu.Unlock()

	if len(resp.ToolCalls) == 0 {
		return true, t.storeAnswer(ctx, resp.Content)
	}
	return false, t.runTools(ctx, step, resp)
}

// announcement is a step's context event. It counts the previous step's messages as the
// session stored them, so it goes out once that write ended (it may still run: runTools), and
// before anything the step's model call emits: the client sees the events in the same order
// either way.
type announcement struct {
	t    *turn
	step int32
	// tokens is the context's breakdown, set when the event was emitted; err is the previous
	// step's write's error, which the step returns.
	tokens *orchestratorv1.TokenBreakdown
	err    error
}

// emit emits the event the first time it is called and returns the previous step's write's
// error every time.
func (a *announcement) emit() error {
	if a.tokens != nil || a.err != nil {
		return a.err
	}
	t := a.t
	// A held step's messages are counted here, as the session service will count them; its
	// write's error is the turn's when the write happens. A write under way is waited for.
	if h := t.held; h.pending(t) {
		if !h.counted {
			t.blocks.currentTokens += t.stepTokens(h.msgs)
			h.counted = true
		}
	} else if a.err = t.awaitStep(); a.err != nil {
		return a.err
	}
	a.tokens = t.blocks.breakdown(t.s.deps.Tokenizer)
	info := proto.Clone(t.ctxInfo).(*orchestratorv1.ContextAssembled)
	info.Step, info.Tokens = a.step, a.tokens
	t.em.emit(&orchestratorv1.TurnEvent{Event: &orchestratorv1.TurnEvent_Context{Context: info}})
	return nil
}

// callModel makes the step's model call. A call that the turn's end cut off still counts, with
// the prompt's estimate and the tokens of the text streamed until then: the provider was asked
// and bills what it produced.
//
// a is emitted before the call's first event, and after the call at the latest. If it fails
// (the previous step's write failed) the call is cancelled, not counted, and the write's error
// is the step's: the turn ends as it would have, had the call waited for the write.
func (t *turn) callModel(ctx context.Context, step int32, msgs []model.Message, a *announcement) (*model.Response, error) {
	ctx, span := t.s.tracer.Start(ctx, "orchestrator.model", trace.WithAttributes(attribute.Int("hermes.step", int(step)), attribute.String("hermes.model", t.model)))
	defer span.End()
	callCtx, cancel := ctx, context.CancelFunc(func() {})
	if t.storing != nil {
		callCtx, cancel = context.WithCancel(ctx)
	}
	defer cancel()
	announced := func() bool {
		if a.emit() != nil {
			cancel()
			return false
		}
		return true
	}
	req := model.Request{Model: t.model, Messages: msgs, Tools: t.mtools}
	var (
		resp     *model.Response
		err      error
		streamed strings.Builder
	)
	if t.s.cfg.Stream {
		resp, err = t.s.deps.Model.Stream(callCtx, req, func(d string) {
			if !announced() {
				return
			}
			streamed.WriteString(d)
			t.em.emit(&orchestratorv1.TurnEvent{Event: &orchestratorv1.TurnEvent_Delta{Delta: &orchestratorv1.TextDelta{Text: d, Step: step}}})
		})
	} else {
		resp, err = t.s.deps.Model.Complete(callCtx, req)
	}
	if !announced() {
		span.SetStatus(otelcodes.Error, a.err.Error())
		return nil, a.err
	}
	if !t.s.cfg.Stream && err == nil && resp.Content != "" {
		t.em.emit(&orchestratorv1.TurnEvent{Event: &orchestratorv1.TurnEvent_Delta{Delta: &orchestratorv1.TextDelta{Text: resp.Content, Step: step}}})
	}
	if err != nil {
		span.SetStatus(otelcodes.Error, err.Error())
		if ctx.Err() != nil {
			t.mu.Lock()
			t.usage.add(model.Usage{}, int(a.tokens.GetTotal()), t.s.deps.Tokenizer.Count(streamed.String()))
			t.mu.Unlock()
		}
		return nil, modelError(ctx, err)
	}
	return resp, nil
}

// modelError maps a model failure to the turn's status.
func modelError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	switch sc := model.StatusCode(err); {
	case model.Unavailable(err):
		return &turnError{code: codes.Unavailable, msg: "the model is unavailable: " + err.Error()}
	case sc == 401 || sc == 403:
		return &turnError{code: codes.FailedPrecondition, msg: "the model endpoint refused the API key: " + err.Error()}
	case sc == 404:
		return &turnError{code: codes.FailedPrecondition, msg: "the model endpoint does not know the model: " + err.Error()}
	case sc >= 400:
		return &turnError{code: codes.FailedPrecondition, msg: "the model endpoint rejected the request: " + err.Error()}
	case errors.Is(err, context.DeadlineExceeded):
		return &turnError{code: codes.DeadlineExceeded, msg: "the model call timed out: " + err.Error()}
	default:
		return &turnError{code: codes.Internal, msg: "the model call failed: " + err.Error()}
	}
}

// storeAnswer appends the final assistant message, and before it in the same append the
// previous step when its write is still held (runTools) and both are not too long together.
func (t *turn) storeAnswer(ctx context.Context, text string) error {
	msgs := []*sessionv1.NewMessage{{
		Role: sessionv1.Role_ROLE_ASSISTANT, Kind: sessionv1.MessageKind_MESSAGE_KIND_TEXT, Content: text,
		ClientId: t.id + ":answer", Metadata: map[string]string{"turn_id": t.id},
	}}
	var h *heldStep
	if t.held != nil && t.held.take(t, len(text)) {
		h, t.held, t.storing = t.held, nil, nil
		msgs = append(slices.Clip(h.msgs), msgs[0])
	} else if err := t.awaitStep(); err != nil {
		return err
	}
	resp, err := t.append(ctx, msgs)
	if err != nil {
		return err
	}
	if h != nil {
		if err := h.after(resp[:len(h.msgs)]); err != nil {
			return err
		}
	}
	t.answer = text
	t.answered = resp[len(resp)-1]
	return nil
}

// sessionWrite is ctx for a session write of the turn. Where the store shares the session's
// file (Options.DeferSessionWrites) the write is deferred: the file's next commit (at the latest
// the turn's end) commits it, and with it every step is on disk before the client hears the
// turn ended. A crash before that loses the deferred steps with the turn, which the
// restarted process finds RUNNING (or not at all) and ends as INTERRUPTED.
func (t *turn) sessionWrite(ctx context.Context) context.Context {
	if t.s.deps.DeferSessionWrites {
		return boltstore.DeferOutgoing(ctx)
	}
	return ctx
}

// append stores messages; when the turn's context has ended it still stores them (bounded by
// storeTimeout) so that a step is never half-written.
func (t *turn) append(ctx context.Context, msgs []*sessionv1.NewMessage) ([]*sessionv1.Message, error) {
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = detached(ctx)
		defer cancel()
	}
	// No step of the turn is stored before its record: a crash then finds the turn to end. A
	// deferred record is committed with the step, or before it.
	if err := t.awaitApplied(ctx); err != nil {
		return nil, err
	}
	var out []*sessionv1.Message
	for len(msgs) > 0 {
		n := min(len(msgs), 100)
		resp, err := t.s.deps.Session.AppendMessages(t.sessionWrite(ctx), &sessionv1.AppendMessagesRequest{SessionId: t.session, UserId: t.user, Messages: msgs[:n]})
		if err != nil {
			return out, &turnError{code: status.Code(err), msg: "storing the turn's messages: " + status.Convert(err).Message()}
		}
		out = append(out, resp.GetMessages()...)
		msgs = msgs[n:]
	}
	t.mu.Lock()
	t.stored = append(t.stored, out...)
	t.mu.Unlock()
	return out, nil
}

// finish ends the turn consistently: the closing message, then one write of the final record,
// the task state (steps done, what is pending) and the turn.finished event (the outbox), then
// the session's lease is released and only then the final event sent, so a client that sends its
// next message on TurnCompleted finds the session free. Writes use a detached context so they
// happen when the client left.
func (t *turn) finish(ctx context.Context, err error) {
	sctx, cancel := detached(ctx)
	defer cancel()
	// The end is stored after the RUNNING record, never before it (which would overwrite it),
	// and the events held back until the record was on disk are sent before the final one (a
	// deferred record is committed with the end). The record's write is bounded by its own
	// detached context.
	<-t.applied
	if err == nil {
		err = t.applyErr
	}
	select {
	case <-t.recorded:
		// A deferred record's commit that failed lost the turn's deferred writes with it.
		if err == nil {
			err = t.recordErr
		}
	default:
	}
	// A step's write that still runs (runTools: the loop ended before the next model call) ends
	// before the closing message and the end are stored; its failure is the turn's, as it was
	// when the write came first.
	if serr := t.awaitStep(); serr != nil {
		err = serr
	}
	st := orchestratorv1.TurnStatus_TURN_STATUS_COMPLETED
	var code codes.Code
	var msg, by string
	if err != nil {
		var te *turnError
		var cb *cancelledBy
		cause := context.Cause(ctx)
		if errors.As(err, &te) && ctx.Err() != nil && (te.code == codes.Canceled || te.code == codes.DeadlineExceeded) {
			// A backend call that failed because the turn ended (cancelled, timed out, its lease
			// lost) says why the turn ended, not which call it cut short.
			err, te = ctx.Err(), nil
		}
		switch {
		case te != nil:
			st, code, msg = orchestratorv1.TurnStatus_TURN_STATUS_FAILED, te.code, te.msg
			if te.closing != "" {
				if _, aerr := t.append(sctx, []*sessionv1.NewMessage{{
					Role: sessionv1.Role_ROLE_ASSISTANT, Kind: sessionv1.MessageKind_MESSAGE_KIND_TEXT, Content: te.closing,
					ClientId: t.id + ":closing", Metadata: map[string]string{"turn_id": t.id, "generated_by": "orchestrator"},
				}}); aerr != nil {
					t.s.log.Warn("closing message not stored", "turn", t.id, "error", aerr)
				}
			}
		case errors.As(cause, &cb):
			st, code, msg, by = orchestratorv1.TurnStatus_TURN_STATUS_CANCELLED, codes.Canceled, "the turn was "+cb.Error(), cb.by
		case errors.Is(cause, errLeaseLost):
			st, code, msg = orchestratorv1.TurnStatus_TURN_STATUS_FAILED, codes.Aborted, "stopped: "+errLeaseLost.Error()+" (this turn could not renew it)"
		case errors.Is(err, context.DeadlineExceeded):
			st, code, msg = orchestratorv1.TurnStatus_TURN_STATUS_CANCELLED, codes.DeadlineExceeded, fmt.Sprintf("the turn's deadline of %s passed", t.timeout())
		case errors.Is(err, context.Canceled):
			st, code, msg = orchestratorv1.TurnStatus_TURN_STATUS_CANCELLED, codes.Canceled, "the client cancelled the turn"
		default:
			// The one mapping of errors to codes, as at the gRPC boundary: a backend's failure is
			// UNAVAILABLE, a bug INTERNAL, neither with its cause's text.
			s := status.Convert(rpc.Classify(ctx, t.s.log, "turn", err))
			st, code, msg = orchestratorv1.TurnStatus_TURN_STATUS_FAILED, s.Code(), s.Message()
		}
		t.span.SetStatus(otelcodes.Error, msg)
		// A failed turn is something an operator may have to act on (a model endpoint down, a
		// key revoked); a cancelled one is the caller's choice.
		if st == orchestratorv1.TurnStatus_TURN_STATUS_FAILED {
			t.s.log.Warn("turn failed", "turn", t.id, "session", t.session, "code", rpc.CodeName(code), "reason", msg, "error", err, "steps", t.steps)
		} else {
			t.s.log.Info("turn cancelled", "turn", t.id, "session", t.session, "reason", msg)
		}
	}

	usage := t.usage.proto()
	var final *orchestratorv1.TurnEvent
	if st == orchestratorv1.TurnStatus_TURN_STATUS_COMPLETED {
		final = &orchestratorv1.TurnEvent{Event: &orchestratorv1.TurnEvent_Completed{Completed: &orchestratorv1.TurnCompleted{
			TurnId: t.id, Text: t.answer, Usage: usage, Steps: t.steps, AssistantMessageSeq: t.answered.GetSeq(),
		}}}
	} else {
		final = &orchestratorv1.TurnEvent{Event: &orchestratorv1.TurnEvent_Failed{Failed: &orchestratorv1.TurnFailed{
			TurnId: t.id, Code: rpc.CodeName(code), Message: msg, Usage: usage, Steps: t.steps,
		}}}
	}
	t.em.hold(final)
	rec := t.record(st)
	rec.CancelledBy = by
	f := t.finishRecord(ctx, rec, st)
	if t.hold != nil {
		f.Lease = t.hold.handOver()
	}
	stored, err := t.store(sctx, errors.Is(context.Cause(ctx), errLeaseLost), f)
	if err != nil {
		t.s.log.Warn("turn record, task state and outbox entry not stored", "turn", t.id, "error", err)
	}
	<-t.released
	t.em.send(final)
	// After the final event, which the client waits for, and before the stream ends: the
	// duration is the turn's as the client saw it.
	t.s.met.turnFinished(sctx, st, t.s.now().Sub(t.started), usage)
	if f.Event != nil && stored {
		t.s.publishNow(ctx, f.Event, f.publishedData())
	}
}

// store writes the turn's end. A turn that lost its session's lease may have been taken for
// dead and ended as INTERRUPTED by another replica meanwhile (orphans.go): its end is then
// stored only if the record is still RUNNING, so one end is stored and published. It reports
// whether the end was stored.
func (t *turn) store(ctx context.Context, leaseLost bool, f *Finish) (bool, error) {
	if leaseLost {
		ok, err := t.s.deps.Store.InterruptTurn(ctx, t.id, func(*orchestratorv1.Turn) *Finish { return f })
		if !errors.Is(err, ErrNotFound) {
			if err == nil && !ok {
				t.s.log.Warn("turn's end not stored: another replica ended it as interrupted", "turn", t.id)
			}
			return ok, err
		}
		// No RUNNING record to compare with (its write failed): stored as usual.
	}
	return true, t.s.deps.Store.FinishTurn(ctx, f)
}

// finishRecord is what the turn's end stores: the record, the steps done, what the session's
// task still needs, and the turn.finished event.
func (t *turn) finishRecord(ctx context.Context, rec *orchestratorv1.Turn, st orchestratorv1.TurnStatus) *Finish {
	f := &Finish{Turn: rec, TTL: t.s.cfg.TurnRetention, KeepSteps: t.s.cfg.TaskStateSteps, MaxPending: maxPending}
	now := t.s.now().UTC()
	completed := st == orchestratorv1.TurnStatus_TURN_STATUS_COMPLETED
	if !completed {
		f.KeepPending = true
		f.Pending = append(f.Pending, Pending{What: "unfinished request: " + clip(t.text, 200), TurnID: t.id, At: now})
	}
	t.mu.Lock()
	f.Steps = t.done
	for _, what := range t.unresolved {
		f.Pending = append(f.Pending, Pending{What: what, TurnID: t.id, At: now})
	}
	t.mu.Unlock()
	f.SetPending = len(f.Pending) > 0 || t.hadPending || !completed
	if t.s.deps.Publish != nil {
		f.Event = t.finishedEvent(ctx)
		f.Event.Status = st
	}
	return f
}
