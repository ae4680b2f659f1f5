package orchestrator

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/textseg"
	"github.com/hermes-agent/hermes/internal/workpool"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// gathering is the part of a turn's preparation that does not need the user's message stored —
// the tools for the turn, the memories relevant to its text and the session's task state — so it
// runs alongside taking the session's lease (tools, memories) and that append (the task state),
// and prepare waits for it.
type gathering struct {
	g *workpool.Group
	// ctx is g's: it ends when a fetch fails, on cancel, or with the turn (run ties it there).
	ctx    context.Context
	cancel context.CancelFunc
	// state is the session's task state, read under the turn's lease (loadTaskState).
	state TaskState
	// memories is the MemoriesRecalled event, emitted by prepare (nil: memory was skipped).
	memories *orchestratorv1.MemoriesRecalled
}

// gather starts fetching the tools and the memories, which depend on the request alone; its
// caller waits for ga.g (prepare) or discards it, whatever happens to the turn, and calls
// ga.cancel when done with it.
func (t *turn) gather(ctx context.Context) *gathering {
	ga := &gathering{}
	ctx, ga.cancel = context.WithCancel(ctx)
	ga.g, ga.ctx = workpool.NewGroup(ctx, t.s.workers)
	ga.g.Go(func() error { return t.loadTools(ga.ctx) })
	ga.g.Go(func() error {
		ga.memories = t.recall(ga.ctx)
		return nil
	})
	return ga
}

// discard stops the gathering and waits for its fetches to end: the turn will not use them.
func (ga *gathering) discard() {
	ga.cancel()
	_ = ga.g.Wait()
}

// loadTaskState adds the read of the session's task state to the gathering; the turn must hold
// the session's lease, so that the previous turn's end is in what it reads.
func (ga *gathering) loadTaskState(t *turn) {
	ga.g.Go(func() error {
		var err error
		if ga.state, err = t.s.deps.Store.TaskState(ga.ctx, t.session); err != nil {
			return fmt.Errorf("loading the task state: %w", err)
		}
		return nil
	})
}

// prepare builds the context (BuildContext, with the summary extended for evicted messages)
// while the gathering started with the turn finishes, and assembles the blocks: those of the
// context first, while the gathering may still run, then those of what it fetched.
func (t *turn) prepare(ctx context.Context, ga *gathering) error {
	built, err := t.buildContext(ctx)
	if err != nil {
		_ = ga.g.Wait()
		return err
	}
	b := &t.blocks
	b.systemPrompt = t.s.cfg.SystemPrompt
	b.counted = map[string]int32{t.s.cfg.SystemPrompt: t.s.promptTokens}
	if in := t.s.instructions.block(ctx); in != "" {
		b.systemPrompt += "\n\n" + in
	}
	if sp := t.opts.GetSystemPrompt(); sp != "" {
		if t.opts.GetReplaceSystemPrompt() {
			b.systemPrompt = sp
		} else {
			b.systemPrompt += "\n\n" + sp
		}
	}
	b.pinned = renderPinned(built.GetPinned())
	b.summary = renderSummary(built.GetSummary())
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
	for _, m := range current {
		b.currentTokens += m.GetTokenCount()
	}
	if err := ga.g.Wait(); err != nil {
		return err
	}
	if ga.memories != nil {
		t.em.emit(&orchestratorv1.TurnEvent{Event: &orchestratorv1.TurnEvent_Memories{Memories: ga.memories}})
	}
	state := ga.state
	t.hadPending = len(state.Pending) > 0

	b.memory = t.memText
	var shown int
	b.taskState, shown = renderTaskState(state, t.s.cfg.TaskStateContextSteps, answeredCalls(history))
	b.counted[b.taskState] = t.s.taskLines.count(t.s.deps.Tokenizer, b.taskState)
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

// buildContext takes the context built with the user message's append (or calls BuildContext)
// and folds evicted messages into the summary, in up to maxSummaryRounds batches, building the
// context again after each.
func (t *turn) buildContext(ctx context.Context) (*sessionv1.BuildContextResponse, error) {
	ctx, span := t.s.tracer.Start(ctx, "orchestrator.build_context")
	defer span.End()
	for round := 0; ; round++ {
		built := t.built
		t.built = nil
		if built == nil {
			var err error
			if built, err = t.s.deps.Session.BuildContext(ctx, t.contextRequest()); err != nil {
				return nil, &turnError{code: status.Code(err), msg: "session service: " + status.Convert(err).Message()}
			}
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

// contextRequest is the turn's BuildContext request.
func (t *turn) contextRequest() *sessionv1.BuildContextRequest {
	return &sessionv1.BuildContextRequest{SessionId: t.session, UserId: t.user, MaxMessageBytes: int32(t.s.cfg.MaxMessageBytes)}
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
	// Deferred unless the context is built again after it (more evicted messages than one
	// batch): that read must see it, and a deferred write is seen only once committed.
	wctx := ctx
	if !built.GetEvictedTruncated() {
		wctx = t.sessionWrite(ctx)
	}
	up, err := t.s.deps.Session.UpdateSummary(wctx, &sessionv1.UpdateSummaryRequest{
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
func (t *turn) recall(ctx context.Context) *orchestratorv1.MemoriesRecalled {
	if t.opts.GetSkipMemory() {
		return nil
	}
	ev := &orchestratorv1.MemoriesRecalled{}
	if t.s.deps.Memory == nil {
		ev.Error = "no memory service is configured"
		return ev
	}
	ctx, span := t.s.tracer.Start(ctx, "orchestrator.recall")
	defer span.End()
	// Only memories relevant to the turn's text enter its context; a value for an argument a
	// call leaves out is looked up when that happens (turn.fill).
	// The safety facts are fetched alongside, not after: they are on the path of every food,
	// travel or health turn.
	safety := t.startSafetyRecall(ctx)
	defer safety.wait()
	resp, err := t.s.deps.Memory.Recall(ctx, &memoryv1.RecallRequest{UserId: t.user, Query: t.text, Limit: int32(t.s.cfg.MemoryLimit)})
	if err != nil {
		ev.Error = "recall failed, the turn goes on without memories: " + status.Convert(err).Message()
		span.SetStatus(otelcodes.Error, err.Error())
		return ev
	}
	mems := resp.GetMemories()
	if len(mems) > t.s.cfg.MemoryLimit {
		mems = mems[:t.s.cfg.MemoryLimit]
	}
	mems = append(mems, safety.merge(mems)...)
	t.memories = mems
	t.memText = renderMemories(mems)
	for _, r := range mems {
		m := r.GetMemory()
		ev.Memories = append(ev.Memories, &orchestratorv1.RecalledMemory{
			Id: m.GetId(), Content: m.GetContent(), Score: r.GetScore(), Type: memoryTypeName(m.GetType()),
			Attributes: m.GetAttributes(), Reason: r.GetReason(),
		})
	}
	return ev
}

// safetyLimit caps the allergy and medical facts added to a turn's memories.
const safetyLimit = 3

// safetyRecall fetches the user's allergy, diet and medical facts (textseg's safety facts) when
// the turn's request is one they can change (food, travel, health: textseg's safety topics),
// whatever words the request shares with them: "order me a pad thai" must see "allergic to
// peanuts". They enter the memory block with the others, under its usual warning that memories
// may not apply. A nil safetyRecall fetches nothing.
type safetyRecall struct {
	done chan struct{}
	resp *memoryv1.RecallResponse // set before done closes; nil when the recall failed
}

// safetyQuery is the query of every safety recall: the lexicon's safety facts.
var safetyQuery = sync.OnceValue(func() string { return strings.Join(textseg.Cues().SafetyFacts, " ") })

func (t *turn) startSafetyRecall(ctx context.Context) *safetyRecall {
	if _, _, ok := textseg.FirstOf(textseg.FoldText(t.text), textseg.Cues().SafetyTopics); !ok {
		return nil
	}
	sr := &safetyRecall{done: make(chan struct{})}
	go func() {
		defer close(sr.done)
		resp, err := t.s.deps.Memory.Recall(ctx, &memoryv1.RecallRequest{UserId: t.user, Query: safetyQuery(), Limit: safetyLimit * 2})
		if err != nil {
			t.s.log.WarnContext(ctx, "safety recall failed", "error", status.Convert(err).Message())
			return
		}
		sr.resp = resp
	}()
	return sr
}

func (sr *safetyRecall) wait() {
	if sr != nil {
		<-sr.done
	}
}

// merge waits for the safety facts and returns those not in have, at most safetyLimit.
func (sr *safetyRecall) merge(have []*memoryv1.RecalledMemory) []*memoryv1.RecalledMemory {
	if sr == nil {
		return nil
	}
	sr.wait()
	seen := map[string]bool{}
	for _, m := range have {
		seen[m.GetMemory().GetId()] = true
	}
	facts := textseg.Cues().SafetyFacts
	var out []*memoryv1.RecalledMemory
	for _, m := range sr.resp.GetMemories() {
		if seen[m.GetMemory().GetId()] || len(out) == safetyLimit {
			continue
		}
		if _, _, ok := textseg.FirstOf(textseg.FoldText(m.GetMemory().GetContent()), facts); !ok {
			continue
		}
		m.Reason = "an allergy, diet or medical fact, recalled for a request it can change; " + m.GetReason()
		out = append(out, m)
	}
	return out
}

// answeredCalls is the set of tool calls whose stored result msgs show (nil when none): a
// result pair repair synthesized does not count, the model having seen no result.
func answeredCalls(msgs []*sessionv1.Message) map[string]bool {
	var seen map[string]bool
	for _, m := range msgs {
		if m.GetKind() != sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT || m.GetSynthesized() || m.GetToolCallId() == "" {
			continue
		}
		if seen == nil {
			seen = make(map[string]bool)
		}
		seen[m.GetToolCallId()] = true
	}
	return seen
}
