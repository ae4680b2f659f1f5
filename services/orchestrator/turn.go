package orchestrator

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/oklog/ulid/v2"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hermes-agent/hermes/internal/model"
	eventsv1 "github.com/hermes-agent/hermes/proto/hermes/events/v1"
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

// rememberCue finds a request to remember something, which lets the extractor use tool results.
var rememberCue = regexp.MustCompile(`(?i)\bremember\b|记住|记下|别忘|記住|記下`)

// turnError ends a turn with a status code and a message for a person; closing, when set, is
// stored as the assistant's last message so the session shows why the turn stopped.
type turnError struct {
	code    codes.Code
	msg     string
	closing string
}

func (e *turnError) Error() string { return e.msg }

// emitter numbers events, sends them to the client and keeps them for the turn record. Tool
// calls run concurrently, so sends are serialized.
type emitter struct {
	mu     sync.Mutex
	seq    int32
	send   func(*orchestratorv1.TurnEvent) error
	events []*orchestratorv1.TurnEvent
	gone   bool
}

func (e *emitter) emit(ev *orchestratorv1.TurnEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seq++
	ev.Seq = e.seq
	ev.Time = timestamppb.Now()
	e.events = append(e.events, ev)
	if e.gone {
		return
	}
	if err := e.send(ev); err != nil {
		// The client went away; its context is cancelled, which ends the turn.
		e.gone = true
	}
}

// recorded returns the events for the turn record, with consecutive text deltas of a step
// merged so that a long answer is not stored token by token.
func (e *emitter) recorded() []*orchestratorv1.TurnEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*orchestratorv1.TurnEvent
	for _, ev := range e.events {
		if d := ev.GetDelta(); d != nil && len(out) > 0 {
			if prev := out[len(out)-1].GetDelta(); prev != nil && prev.GetStep() == d.GetStep() {
				prev.Text += d.GetText()
				continue
			}
			ev = proto.Clone(ev).(*orchestratorv1.TurnEvent)
		}
		out = append(out, ev)
	}
	return out
}

// usageAcc sums the usage of a turn's model calls.
type usageAcc struct {
	u         orchestratorv1.Usage
	estimated bool
}

// add counts one call: the provider's usage when it reported one, else the tokenizer's counts.
func (a *usageAcc) add(u model.Usage, promptEstimate, completionEstimate int) {
	a.u.ModelCalls++
	if !u.Reported {
		a.estimated = true
		a.u.PromptTokens += int64(promptEstimate)
		a.u.CompletionTokens += int64(completionEstimate)
		a.u.TotalTokens += int64(promptEstimate + completionEstimate)
		return
	}
	a.u.PromptTokens += int64(u.PromptTokens)
	a.u.CompletionTokens += int64(u.CompletionTokens)
	a.u.CachedTokens += int64(u.CachedTokens)
	total := u.TotalTokens
	if total == 0 {
		total = u.PromptTokens + u.CompletionTokens
	}
	a.u.TotalTokens += int64(total)
}

func (a *usageAcc) proto() *orchestratorv1.Usage {
	u := proto.Clone(&a.u).(*orchestratorv1.Usage)
	u.Source = "provider"
	if a.estimated {
		u.Source = "tokenizer"
	}
	if u.ModelCalls == 0 {
		u.Source = ""
	}
	return u
}

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

	running chan struct{}
	// hadPending is whether the task state had pending items when the turn started.
	hadPending bool

	userMsg  *sessionv1.Message
	stored   []*sessionv1.Message
	memories []*memoryv1.RecalledMemory
	memText  string
	tools    []*toolsv1.Tool
	byName   map[string]*toolsv1.Tool
	mtools   []model.Tool
	blocks   contextBlocks
	ctxInfo  *orchestratorv1.ContextAssembled
	usage    usageAcc
	answer   string
	answered *sessionv1.Message

	mu        sync.Mutex
	toolCalls []*orchestratorv1.ToolCallRecord
	// failures counts, per tool and error code, the failures in a row.
	failures map[string]int
	// unresolved holds this turn's failed calls whose tool did not succeed afterwards.
	unresolved map[string]string
}

func (s *Service) newTurn(req *orchestratorv1.RunTurnRequest, user string, send func(*orchestratorv1.TurnEvent) error) *turn {
	t := &turn{
		s:          s,
		id:         ulid.MustNew(ulid.Now(), rand.Reader).String(),
		session:    req.GetSessionId(),
		user:       user,
		text:       req.GetText(),
		opts:       req.GetOptions(),
		em:         &emitter{send: send},
		started:    time.Now(),
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

// run executes the turn: the user message first (errors there are the RPC's status), then the
// loop, then the consistent end (pending items, turn record, event).
func (t *turn) run(parent context.Context) error {
	ctx, span := t.s.tracer.Start(parent, "orchestrator.turn", trace.WithAttributes(
		attribute.String("hermes.turn_id", t.id), attribute.String("hermes.session_id", t.session)))
	defer span.End()
	t.span = span
	ctx, cancel := context.WithTimeout(ctx, t.timeout())
	defer cancel()

	resp, err := t.s.deps.Session.AppendMessages(ctx, &sessionv1.AppendMessagesRequest{
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
	})
	if err != nil {
		span.SetStatus(otelcodes.Error, err.Error())
		return peerStatus("session", err)
	}
	t.userMsg = resp.GetMessages()[0]
	t.stored = append(t.stored, t.userMsg)
	t.em.emit(&orchestratorv1.TurnEvent{Event: &orchestratorv1.TurnEvent_Started{Started: &orchestratorv1.TurnStarted{
		TurnId: t.id, SessionId: t.session, UserMessageSeq: t.userMsg.GetSeq(), Model: t.model, UserId: t.user,
	}}})
	// The RUNNING record is written while the turn goes on; the final record waits for it, so
	// it is never overwritten by the older one.
	// The record is taken now, before the loop can change the turn; only the write is
	// concurrent.
	t.running = make(chan struct{})
	running := t.record(orchestratorv1.TurnStatus_TURN_STATUS_RUNNING)
	go func() {
		defer close(t.running)
		rctx, cancel := detached(ctx)
		defer cancel()
		t.putRecord(rctx, running)
	}()

	err = t.loop(ctx)
	t.finish(ctx, err)
	return nil
}

// loop prepares the context and runs model steps until a final answer.
func (t *turn) loop(ctx context.Context) error {
	if err := t.prepare(ctx); err != nil {
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

// prepare gathers what the context is built from: BuildContext (with the summary extended for
// evicted messages), the tools for the turn and then the memories (recall is told the tools'
// required arguments so a memory that can fill one is found), and the task state, concurrently.
func (t *turn) prepare(ctx context.Context) error {
	var (
		built *sessionv1.BuildContextResponse
		state TaskState
	)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		var err error
		built, err = t.buildContext(gctx)
		return err
	})
	g.Go(func() error {
		if err := t.loadTools(gctx); err != nil {
			return err
		}
		t.recall(gctx)
		return nil
	})
	g.Go(func() error {
		var err error
		state, err = t.s.deps.Store.TaskState(gctx, t.session)
		if err != nil {
			return &turnError{code: status.Code(storeStatus(err)), msg: "loading the task state: " + err.Error()}
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return err
	}
	t.hadPending = len(state.Pending) > 0

	b := &t.blocks
	b.systemPrompt = t.s.cfg.SystemPrompt
	b.counted = map[string]int32{t.s.cfg.SystemPrompt: t.s.promptTokens}
	if sp := t.opts.GetSystemPrompt(); sp != "" {
		b.systemPrompt = sp
	}
	b.memory = t.memText
	b.pinned = renderPinned(built.GetPinned())
	b.summary = renderSummary(built.GetSummary())
	var shown int
	b.taskState, shown = renderTaskState(state, t.s.cfg.TaskStateContextSteps)
	var history, current []*sessionv1.Message
	for _, m := range built.GetWindow() {
		if m.GetSeq() < t.userMsg.GetSeq() {
			history = append(history, m)
			b.historyTokens += int(m.GetTokenCount())
		} else {
			current = append(current, m)
		}
	}
	if len(current) == 0 {
		current = []*sessionv1.Message{t.userMsg}
	}
	b.history = sessionToModel(history)
	b.current = sessionToModel(current)
	b.tools = t.mtools
	for _, tool := range t.tools {
		b.toolTokens += toolSchemaTokens(t.s.deps.Tokenizer, tool)
	}
	t.ctxInfo.Repairs = int32(len(built.GetRepairs()))
	t.ctxInfo.WindowTurns = built.GetWindowTurns()
	t.ctxInfo.TaskStateSteps = int32(shown)
	t.ctxInfo.PinnedMessages = int32(len(built.GetPinned()))
	t.ctxInfo.SummaryThroughSeq = built.GetSummary().GetSeq()
	return nil
}

// buildContext calls BuildContext and folds evicted messages into the summary, in up to
// maxSummaryRounds batches.
func (t *turn) buildContext(ctx context.Context) (*sessionv1.BuildContextResponse, error) {
	ctx, span := t.s.tracer.Start(ctx, "orchestrator.build_context")
	defer span.End()
	for round := 0; ; round++ {
		built, err := t.s.deps.Session.BuildContext(ctx, &sessionv1.BuildContextRequest{SessionId: t.session, UserId: t.user})
		if err != nil {
			return nil, &turnError{code: status.Code(err), msg: "session service: " + status.Convert(err).Message()}
		}
		if len(built.GetEvicted()) == 0 || round >= maxSummaryRounds {
			return built, nil
		}
		sum, ok := t.extendSummary(ctx, built)
		if ok {
			built.Summary = sum
		}
		if !built.GetEvictedTruncated() || !ok {
			return built, nil
		}
	}
}

// extendSummary folds one batch of evicted messages into the summary and stores it.
func (t *turn) extendSummary(ctx context.Context, built *sessionv1.BuildContextResponse) (*sessionv1.Message, bool) {
	ctx, span := t.s.tracer.Start(ctx, "orchestrator.summary")
	defer span.End()
	evicted := built.GetEvicted()
	through := evicted[len(evicted)-1].GetSeq()
	res := t.s.sum.extend(ctx, t.model, built.GetSummary().GetContent(), evicted)
	if res.called {
		t.mu.Lock()
		t.usage.add(res.usage, 0, 0)
		t.mu.Unlock()
	}
	up, err := t.s.deps.Session.UpdateSummary(ctx, &sessionv1.UpdateSummaryRequest{
		SessionId: t.session, UserId: t.user, Content: res.text, ThroughSeq: through,
	})
	if err != nil {
		// Another turn may have folded further already (FAILED_PRECONDITION); either way this
		// turn goes on with the summary it has.
		t.s.log.Warn("summary not stored", "session", t.session, "through_seq", through, "error", err)
		span.SetStatus(otelcodes.Error, err.Error())
		return nil, false
	}
	if res.fallback {
		span.SetAttributes(attribute.String("hermes.summary_fallback", res.reason))
	}
	t.em.emit(&orchestratorv1.TurnEvent{Event: &orchestratorv1.TurnEvent_Summary{Summary: &orchestratorv1.SummaryUpdated{
		ThroughSeq:     through,
		Tokens:         up.GetSummary().GetTokenCount(),
		Fallback:       res.fallback,
		FoldedMessages: int32(len(evicted)),
	}}})
	return up.GetSummary(), true
}

// loadTools picks the tools for the turn: the requested groups, or SelectTools (which returns
// all of them when there are at most MaxTools).
func (t *turn) loadTools(ctx context.Context) error {
	ctx, span := t.s.tracer.Start(ctx, "orchestrator.tools")
	defer span.End()
	tc := t.s.deps.Tools
	var tools []*toolsv1.Tool
	if groups := t.opts.GetToolGroups(); len(groups) > 0 {
		token := ""
		for {
			resp, err := tc.ListTools(ctx, &toolsv1.ListToolsRequest{Groups: groups, PageSize: 1000, PageToken: token})
			if err != nil {
				return &turnError{code: status.Code(err), msg: "listing tools: " + status.Convert(err).Message()}
			}
			tools = append(tools, resp.GetTools()...)
			if token = resp.GetNextPageToken(); token == "" {
				break
			}
		}
		t.ctxInfo.ToolSelection = fmt.Sprintf("%d tools of groups %s", len(tools), strings.Join(groups, ", "))
	} else {
		resp, err := tc.SelectTools(ctx, &toolsv1.SelectToolsRequest{Text: t.text, MaxTools: int32(t.s.cfg.MaxTools)})
		if err != nil {
			return &turnError{code: status.Code(err), msg: "selecting tools: " + status.Convert(err).Message()}
		}
		for _, st := range resp.GetTools() {
			tools = append(tools, st.GetTool())
		}
		if resp.GetAllTools() {
			t.ctxInfo.ToolSelection = fmt.Sprintf("all %d tools", len(tools))
		} else {
			t.ctxInfo.ToolSelection = fmt.Sprintf("selected %d of %d tools (groups %s; %d of %d schema tokens)",
				len(tools), resp.GetTotalTools(), strings.Join(resp.GetGroups(), ", "), resp.GetSelectedSchemaTokens(), resp.GetTotalSchemaTokens())
		}
	}
	t.tools = tools
	t.byName = make(map[string]*toolsv1.Tool, len(tools))
	for _, tool := range tools {
		t.byName[tool.GetSpec().GetName()] = tool
		t.ctxInfo.Tools = append(t.ctxInfo.Tools, tool.GetSpec().GetName())
	}
	t.mtools = modelTools(tools)
	return nil
}

// recall fetches memories; a failure is reported and the turn goes on without them.
func (t *turn) recall(ctx context.Context) {
	if t.opts.GetSkipMemory() {
		return
	}
	ev := &orchestratorv1.MemoriesRecalled{}
	defer func() {
		t.em.emit(&orchestratorv1.TurnEvent{Event: &orchestratorv1.TurnEvent_Memories{Memories: ev}})
	}()
	if t.s.deps.Memory == nil {
		ev.Error = "no memory service is configured"
		return
	}
	ctx, span := t.s.tracer.Start(ctx, "orchestrator.recall")
	defer span.End()
	var keys []string
	seen := map[string]bool{}
	for _, tool := range t.tools {
		for _, k := range requiredArgs(tool.GetSpec().GetInputSchema()) {
			if !seen[k] && len(keys) < 16 {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	resp, err := t.s.deps.Memory.Recall(ctx, &memoryv1.RecallRequest{
		UserId: t.user, Query: t.text, Limit: int32(t.s.cfg.MemoryLimit), AttributeKeys: keys,
	})
	if err != nil {
		ev.Error = "recall failed, the turn goes on without memories: " + status.Convert(err).Message()
		span.SetStatus(otelcodes.Error, err.Error())
		return
	}
	mems := resp.GetMemories()
	if len(mems) > t.s.cfg.MemoryLimit {
		mems = mems[:t.s.cfg.MemoryLimit]
	}
	t.memories = mems
	t.memText = renderMemories(mems)
	for _, r := range mems {
		m := r.GetMemory()
		ev.Memories = append(ev.Memories, &orchestratorv1.RecalledMemory{
			Id: m.GetId(), Content: m.GetContent(), Score: r.GetScore(), Type: memoryTypeName(m.GetType()),
			Attributes: m.GetAttributes(), Reason: r.GetReason(),
		})
	}
}

// step makes one model call and, when it asks for tools, runs them and stores the step. It
// reports whether the turn has its final answer.
func (t *turn) step(ctx context.Context, step int32) (bool, error) {
	msgs := t.blocks.messages()
	tokens := t.blocks.breakdown(t.s.deps.Tokenizer)
	info := proto.Clone(t.ctxInfo).(*orchestratorv1.ContextAssembled)
	info.Step, info.Tokens = step, tokens
	t.em.emit(&orchestratorv1.TurnEvent{Event: &orchestratorv1.TurnEvent_Context{Context: info}})

	resp, err := t.callModel(ctx, step, msgs)
	if err != nil {
		return false, err
	}
	completion := t.s.deps.Tokenizer.Count(resp.Content)
	for _, c := range resp.ToolCalls {
		completion += t.s.deps.Tokenizer.Count(c.Name) + t.s.deps.Tokenizer.Count(c.Arguments)
	}
	t.mu.Lock()
	t.usage.add(resp.Usage, int(tokens.GetTotal()), completion)
	t.mu.Unlock()

	if len(resp.ToolCalls) == 0 {
		return true, t.storeAnswer(ctx, resp.Content)
	}
	return false, t.runTools(ctx, step, resp)
}

func (t *turn) callModel(ctx context.Context, step int32, msgs []model.Message) (*model.Response, error) {
	ctx, span := t.s.tracer.Start(ctx, "orchestrator.model", trace.WithAttributes(attribute.Int("hermes.step", int(step)), attribute.String("hermes.model", t.model)))
	defer span.End()
	req := model.Request{Model: t.model, Messages: msgs, Tools: t.mtools}
	var (
		resp *model.Response
		err  error
	)
	if t.s.cfg.Stream {
		resp, err = t.s.deps.Model.Stream(ctx, req, func(d string) {
			t.em.emit(&orchestratorv1.TurnEvent{Event: &orchestratorv1.TurnEvent_Delta{Delta: &orchestratorv1.TextDelta{Text: d, Step: step}}})
		})
	} else {
		resp, err = t.s.deps.Model.Complete(ctx, req)
		if err == nil && resp.Content != "" {
			t.em.emit(&orchestratorv1.TurnEvent{Event: &orchestratorv1.TurnEvent_Delta{Delta: &orchestratorv1.TextDelta{Text: resp.Content, Step: step}}})
		}
	}
	if err != nil {
		span.SetStatus(otelcodes.Error, err.Error())
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

// storeAnswer appends the final assistant message.
func (t *turn) storeAnswer(ctx context.Context, text string) error {
	resp, err := t.append(ctx, []*sessionv1.NewMessage{{
		Role: sessionv1.Role_ROLE_ASSISTANT, Kind: sessionv1.MessageKind_MESSAGE_KIND_TEXT, Content: text,
		ClientId: t.id + ":answer", Metadata: map[string]string{"turn_id": t.id},
	}})
	if err != nil {
		return err
	}
	t.answer = text
	t.answered = resp[0]
	return nil
}

// append stores messages; when the turn's context has ended it still stores them (bounded by
// storeTimeout) so that a step is never half-written.
func (t *turn) append(ctx context.Context, msgs []*sessionv1.NewMessage) ([]*sessionv1.Message, error) {
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = detached(ctx)
		defer cancel()
	}
	var out []*sessionv1.Message
	for len(msgs) > 0 {
		n := min(len(msgs), 100)
		resp, err := t.s.deps.Session.AppendMessages(ctx, &sessionv1.AppendMessagesRequest{SessionId: t.session, UserId: t.user, Messages: msgs[:n]})
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

// outcome is one tool call of a step.
type outcome struct {
	call     model.ToolCall
	started  *orchestratorv1.ToolCallStarted
	result   *toolsv1.ToolResult
	finished *orchestratorv1.ToolCallFinished
}

// runTools runs a step's tool calls concurrently, then stores the whole step — the assistant's
// text, every call and every result — in one append, so the log never holds a call without its
// result. A client that goes away cancels the calls; they are stored with a "cancelled" result.
func (t *turn) runTools(ctx context.Context, step int32, resp *model.Response) error {
	calls := resp.ToolCalls
	outs := make([]*outcome, len(calls))
	seenIDs := map[string]bool{}
	for i, c := range calls {
		if c.ID == "" || seenIDs[c.ID] {
			c.ID = fmt.Sprintf("%s-%d-%d", strings.ToLower(t.id), step, i)
		}
		seenIDs[c.ID] = true
		outs[i] = t.startCall(step, c)
	}
	var wg sync.WaitGroup
	for i, o := range outs {
		if i >= t.s.cfg.MaxCallsPerStep {
			o.result = &toolsv1.ToolResult{Error: &toolsv1.ToolError{
				Code:    toolsv1.ErrorCode_ERROR_CODE_EXECUTION,
				Message: fmt.Sprintf("not run: at most %d tool calls are allowed in one step; call this again in the next step", t.s.cfg.MaxCallsPerStep),
			}}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			o.result = t.execute(ctx, o)
		}()
	}
	wg.Wait()
	for _, o := range outs {
		t.finishCall(o)
	}

	// Store the step.
	var msgs []*sessionv1.NewMessage
	md := map[string]string{"turn_id": t.id}
	if resp.Content != "" {
		msgs = append(msgs, &sessionv1.NewMessage{Role: sessionv1.Role_ROLE_ASSISTANT, Kind: sessionv1.MessageKind_MESSAGE_KIND_TEXT,
			Content: resp.Content, ClientId: fmt.Sprintf("%s:%d:text", t.id, step), Metadata: md})
	}
	for i, o := range outs {
		msgs = append(msgs, &sessionv1.NewMessage{Role: sessionv1.Role_ROLE_ASSISTANT, Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL,
			Content: o.call.Arguments, ToolCallId: o.call.ID, ToolName: o.call.Name, ClientId: fmt.Sprintf("%s:%d:call:%d", t.id, step, i), Metadata: md})
	}
	content := make([]string, len(outs))
	for i, o := range outs {
		content[i] = toolResultContent(o.result)
		msgs = append(msgs, &sessionv1.NewMessage{Role: sessionv1.Role_ROLE_TOOL, Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT,
			Content: content[i], ToolCallId: o.call.ID, ToolName: o.call.Name, ClientId: fmt.Sprintf("%s:%d:result:%d", t.id, step, i), Metadata: md})
	}
	if _, err := t.append(ctx, msgs); err != nil {
		return err
	}
	assistant := model.Message{Role: model.RoleAssistant, Content: resp.Content}
	for _, o := range outs {
		assistant.ToolCalls = append(assistant.ToolCalls, o.call)
	}
	t.blocks.current = append(t.blocks.current, assistant)
	for i, o := range outs {
		t.blocks.current = append(t.blocks.current, model.Message{Role: model.RoleTool, ToolCallID: o.call.ID, Content: content[i]})
	}
	t.recordSteps(ctx, outs)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return t.checkFailures(outs)
}

// startCall fills missing required arguments from memory, derives the idempotency key, and
// announces the call.
func (t *turn) startCall(step int32, c model.ToolCall) *outcome {
	tool := t.byName[c.Name]
	var filled []*orchestratorv1.FilledArgument
	if tool != nil {
		c.Arguments, filled = fillFromMemory(tool.GetSpec().GetInputSchema(), c.Arguments, t.memories)
	}
	started := &orchestratorv1.ToolCallStarted{CallId: c.ID, Name: c.Name, Arguments: c.Arguments, Filled: filled, Step: step}
	if tool.GetSpec().GetIdempotent() {
		started.IdempotencyKey = IdempotencyKey(t.session, c.Name, c.Arguments)
	}
	t.em.emit(&orchestratorv1.TurnEvent{Event: &orchestratorv1.TurnEvent_ToolCall{ToolCall: started}})
	return &outcome{call: c, started: started}
}

// execute runs one call through the tool service. A failure to reach the service becomes a
// failed result the model sees; a cancelled turn gives a "cancelled" result.
func (t *turn) execute(ctx context.Context, o *outcome) *toolsv1.ToolResult {
	ctx, span := t.s.tracer.Start(ctx, "orchestrator.tool", trace.WithAttributes(attribute.String("hermes.tool", o.call.Name)))
	defer span.End()
	start := time.Now()
	resp, err := t.s.deps.Tools.ExecuteTool(ctx, &toolsv1.ExecuteToolRequest{
		Name: o.call.Name, Arguments: o.call.Arguments, CallId: o.call.ID,
		SessionId: t.session, UserId: t.user, IdempotencyKey: o.started.GetIdempotencyKey(),
	})
	switch {
	case err == nil:
		if !resp.GetResult().GetSuccess() {
			span.SetStatus(otelcodes.Error, resp.GetResult().GetError().GetMessage())
		}
		return resp.GetResult()
	case ctx.Err() != nil:
		return &toolsv1.ToolResult{Duration: durationpb.New(time.Since(start)), Error: &toolsv1.ToolError{
			Code: toolsv1.ErrorCode_ERROR_CODE_UNSPECIFIED, Message: "cancelled: the turn ended before the tool finished; it may or may not have run",
		}}
	default:
		span.SetStatus(otelcodes.Error, err.Error())
		return &toolsv1.ToolResult{Duration: durationpb.New(time.Since(start)), Error: &toolsv1.ToolError{
			Code: toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE, Message: "the tool service could not run the call: " + status.Convert(err).Message(),
		}}
	}
}

func (t *turn) finishCall(o *outcome) {
	r := o.result
	code := failureCode(r)
	fin := &orchestratorv1.ToolCallFinished{
		CallId: o.call.ID, Name: o.call.Name, Success: r.GetSuccess(), Output: clip(r.GetOutput(), outputPreviewRunes),
		Duration: r.GetDuration(), Attempts: r.GetAttempts(), Replayed: r.GetReplayed(),
	}
	if !r.GetSuccess() {
		fin.ErrorCode, fin.Error = code, r.GetError().GetMessage()
	}
	o.finished = fin
	label := o.call.Name
	if t.byName[label] == nil {
		label = "unknown" // a name the model made up: one series for all of them, not one each
	}
	t.s.met.toolCall(context.Background(), label, fin.GetErrorCode())
	t.em.emit(&orchestratorv1.TurnEvent{Event: &orchestratorv1.TurnEvent_ToolResult{ToolResult: fin}})
	t.mu.Lock()
	t.toolCalls = append(t.toolCalls, &orchestratorv1.ToolCallRecord{Call: o.started, Result: fin})
	t.mu.Unlock()
}

// recordSteps adds the step's successful calls to the task state.
func (t *turn) recordSteps(ctx context.Context, outs []*outcome) {
	var steps []Step
	for _, o := range outs {
		if !o.result.GetSuccess() {
			continue
		}
		args, err := CanonicalJSON(o.call.Arguments)
		if err != nil {
			args = o.call.Arguments
		}
		_, gist := resultGist(toolResultContent(o.result))
		steps = append(steps, Step{
			Tool: o.call.Name, Arguments: args, Result: clip(gist, resultPreviewRunes), TurnID: t.id, CallID: o.call.ID,
			IdempotencyKey: o.started.GetIdempotencyKey(), Replayed: o.result.GetReplayed(), At: time.Now().UTC(),
		})
	}
	if len(steps) == 0 {
		return
	}
	sctx, cancel := detached(ctx)
	defer cancel()
	if err := t.s.deps.Store.AddSteps(sctx, t.session, steps, t.s.cfg.TaskStateSteps); err != nil {
		t.s.log.Warn("task state not updated", "session", t.session, "error", err)
	}
}

// checkFailures ends the turn when the same tool failed the same way MaxSameFailures times in a
// row: the model is not correcting itself, and looping would only burn tokens.
func (t *turn) checkFailures(outs []*outcome) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, o := range outs {
		name := o.call.Name
		if o.result.GetSuccess() {
			for k := range t.failures {
				if strings.HasPrefix(k, name+"\x00") {
					delete(t.failures, k)
				}
			}
			delete(t.unresolved, name)
			continue
		}
		code := o.finished.GetErrorCode()
		k := name + "\x00" + code
		t.failures[k]++
		t.unresolved[name] = fmt.Sprintf("%s failed (%s): %s", name, code, clip(o.result.GetError().GetMessage(), 200))
		if n := t.failures[k]; n >= t.s.cfg.MaxSameFailures {
			msg := fmt.Sprintf("stopped after the tool %s failed %d times in a row (%s): %s", name, n, code, clip(o.result.GetError().GetMessage(), 300))
			return &turnError{code: codes.Aborted, msg: msg, closing: "I could not finish this: " + msg}
		}
	}
	return nil
}

// finish ends the turn consistently: closing message, pending items, the final event, the turn
// record and turn.finished. Writes use a detached context so they happen when the client left.
func (t *turn) finish(ctx context.Context, err error) {
	sctx, cancel := detached(ctx)
	defer cancel()
	st := orchestratorv1.TurnStatus_TURN_STATUS_COMPLETED
	var code codes.Code
	var msg string
	if err != nil {
		var te *turnError
		switch {
		case errors.As(err, &te):
			st, code, msg = orchestratorv1.TurnStatus_TURN_STATUS_FAILED, te.code, te.msg
			if te.closing != "" {
				if _, aerr := t.append(sctx, []*sessionv1.NewMessage{{
					Role: sessionv1.Role_ROLE_ASSISTANT, Kind: sessionv1.MessageKind_MESSAGE_KIND_TEXT, Content: te.closing,
					ClientId: t.id + ":closing", Metadata: map[string]string{"turn_id": t.id, "generated_by": "orchestrator"},
				}}); aerr != nil {
					t.s.log.Warn("closing message not stored", "turn", t.id, "error", aerr)
				}
			}
		case errors.Is(err, context.DeadlineExceeded):
			st, code, msg = orchestratorv1.TurnStatus_TURN_STATUS_CANCELLED, codes.DeadlineExceeded, fmt.Sprintf("the turn's deadline of %s passed", t.timeout())
		case errors.Is(err, context.Canceled):
			st, code, msg = orchestratorv1.TurnStatus_TURN_STATUS_CANCELLED, codes.Canceled, "the client cancelled the turn"
		default:
			st, code, msg = orchestratorv1.TurnStatus_TURN_STATUS_FAILED, codes.Internal, err.Error()
		}
		t.span.SetStatus(otelcodes.Error, msg)
	}
	t.setPending(sctx, st)

	usage := t.usage.proto()
	t.s.met.turnFinished(sctx, st, time.Since(t.started), usage)
	if st == orchestratorv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.em.emit(&orchestratorv1.TurnEvent{Event: &orchestratorv1.TurnEvent_Completed{Completed: &orchestratorv1.TurnCompleted{
			TurnId: t.id, Text: t.answer, Usage: usage, Steps: t.steps, AssistantMessageSeq: t.answered.GetSeq(),
		}}})
	} else {
		t.em.emit(&orchestratorv1.TurnEvent{Event: &orchestratorv1.TurnEvent_Failed{Failed: &orchestratorv1.TurnFailed{
			TurnId: t.id, Code: canonicalCode(code), Message: msg, Usage: usage, Steps: t.steps,
		}}})
	}
	<-t.running
	t.putRecord(sctx, t.record(st))
	t.publish(ctx)
}

// setPending records what the session's task still needs.
func (t *turn) setPending(ctx context.Context, st orchestratorv1.TurnStatus) {
	var pending []Pending
	now := time.Now().UTC()
	if st != orchestratorv1.TurnStatus_TURN_STATUS_COMPLETED {
		prev, err := t.s.deps.Store.TaskState(ctx, t.session)
		if err == nil {
			pending = append(pending, prev.Pending...)
		}
		pending = append(pending, Pending{What: "unfinished request: " + clip(t.text, 200), TurnID: t.id, At: now})
	}
	t.mu.Lock()
	for _, what := range t.unresolved {
		pending = append(pending, Pending{What: what, TurnID: t.id, At: now})
	}
	t.mu.Unlock()
	if len(pending) > maxPending {
		pending = pending[len(pending)-maxPending:]
	}
	if len(pending) == 0 && !t.hadPending && st == orchestratorv1.TurnStatus_TURN_STATUS_COMPLETED {
		return
	}
	if err := t.s.deps.Store.SetPending(ctx, t.session, pending); err != nil {
		t.s.log.Warn("pending items not stored", "session", t.session, "error", err)
	}
}

// record is the turn's record as it stands, in status st.
func (t *turn) record(st orchestratorv1.TurnStatus) *orchestratorv1.Turn {
	t.mu.Lock()
	rec := &orchestratorv1.Turn{
		Id: t.id, SessionId: t.session, UserId: t.user, Status: st, Text: t.text, Answer: t.answer,
		Usage: t.usage.proto(), ToolCalls: append([]*orchestratorv1.ToolCallRecord(nil), t.toolCalls...),
		StartedAt: timestamppb.New(t.started),
	}
	t.mu.Unlock()
	rec.Events = t.em.recorded()
	if st != orchestratorv1.TurnStatus_TURN_STATUS_RUNNING {
		rec.FinishedAt = timestamppb.Now()
	}
	return rec
}

func (t *turn) putRecord(ctx context.Context, rec *orchestratorv1.Turn) {
	if err := t.s.deps.Store.PutTurn(ctx, rec, t.s.cfg.TurnRetention); err != nil {
		t.s.log.Warn("turn record not stored", "turn", t.id, "error", err)
	}
}

// publish sends turn.finished in the background, retrying until PublishTimeout; a failure is
// logged and never fails the user's turn.
func (t *turn) publish(ctx context.Context) {
	if t.s.deps.Publish == nil {
		return
	}
	ev := &eventsv1.TurnFinished{
		TurnId: t.id, SessionId: t.session, UserId: t.user, FinishedAt: timestamppb.Now(),
		RememberRequested: rememberCue.MatchString(t.text),
	}
	if t.memText != "" {
		ev.Messages = append(ev.Messages, &eventsv1.TurnMessage{
			Message:          &sessionv1.Message{Role: sessionv1.Role_ROLE_SYSTEM, Kind: sessionv1.MessageKind_MESSAGE_KIND_TEXT, Content: t.memText},
			IsRecalledMemory: true,
		})
	}
	t.mu.Lock()
	for _, m := range t.stored {
		ev.Messages = append(ev.Messages, &eventsv1.TurnMessage{Message: m, IsToolResult: m.GetKind() == sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT})
	}
	t.mu.Unlock()
	for _, r := range t.memories {
		ev.RecalledMemoryIds = append(ev.RecalledMemoryIds, r.GetMemory().GetId())
	}
	carrier := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(ctx, carrier)
	propagation.TraceContext{}.Inject(ctx, carrier)
	ev.Traceparent = carrier.Get("traceparent")

	s := t.s
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		pctx, cancel := context.WithTimeout(s.bgCtx, s.cfg.PublishTimeout)
		defer cancel()
		pctx = trace.ContextWithSpanContext(pctx, trace.SpanContextFromContext(ctx))
		if err := s.deps.Publish(pctx, ev); err != nil {
			s.log.Error("turn.finished not published; the memory extractor will not see this turn", "turn", ev.GetTurnId(), "error", err)
		}
	}()
}

// canonicalCode is a gRPC code's canonical name ("DEADLINE_EXCEEDED"), the spelling of the
// gRPC specification, grpcurl and every other language.
func canonicalCode(c codes.Code) string {
	var b strings.Builder
	prev := rune(0)
	for _, r := range c.String() {
		if unicode.IsUpper(r) && unicode.IsLower(prev) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
		prev = r
	}
	return b.String()
}
