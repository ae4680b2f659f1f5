package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hermes-agent/hermes/internal/errclass"
	"github.com/hermes-agent/hermes/internal/model"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// outcome is one tool call of a step. call.ID is the call's id in the session, unique in it;
// modelID is the id the provider gave the call.
type outcome struct {
	call     model.ToolCall
	modelID  string
	started  *orchestratorv1.ToolCallStarted
	result   *toolsv1.ToolResult
	finished *orchestratorv1.ToolCallFinished
	// held is the result of a call that is not run (see turn.fill).
	held *toolsv1.ToolResult
}

// stepIDs locates the latest tool step in the current turn's messages: they carry the
// provider's call ids, which the provider's next request must answer, until the next step.
type stepIDs struct {
	// from is the index of the step's assistant message in blocks.current; ids maps the
	// provider's call ids to the stored ones.
	from int
	ids  map[string]string
}

// storedCallID is a call's id in the session: the turn id (a ULID), the step and the call's
// place in it, so pairing calls with results never depends on the provider's ids, which some
// providers repeat in every turn ("call_0").
func storedCallID(turnID string, step int32, i int) string {
	return fmt.Sprintf("%s-%d-%d", strings.ToLower(turnID), step, i)
}

// runTools runs a step's tool calls concurrently, then stores the whole step — the assistant's
// text, every call and every result — in one append, so the log never holds a call without its
// result. A client that goes away cancels the calls; they are stored with a "cancelled" result.
func (t *turn) runTools(ctx context.Context, step int32, resp *model.Response) error {
	// The previous step is stored before this one's calls run.
	if err := t.awaitStep(); err != nil {
		return err
	}
	calls := resp.ToolCalls
	outs := make([]*outcome, len(calls))
	seenIDs := map[string]bool{}
	for i, c := range calls {
		modelID := c.ID
		c.ID = storedCallID(t.id, step, i)
		if modelID == "" || seenIDs[modelID] {
			modelID = c.ID // the provider's request needs distinct ids within the step
		}
		seenIDs[modelID] = true
		outs[i] = t.startCall(ctx, step, c)
		outs[i].modelID = modelID
	}
	var run []*outcome
	for i, o := range outs {
		if o.held != nil {
			o.result = o.held
			continue
		}
		if i >= t.s.cfg.MaxCallsPerStep {
			o.result = &toolsv1.ToolResult{Error: &toolsv1.ToolError{
				Code:    toolsv1.ErrorCode_ERROR_CODE_EXECUTION,
				Message: fmt.Sprintf("not run: at most %d tool calls are allowed in one step; call this again in the next step", t.s.cfg.MaxCallsPerStep),
			}}
			continue
		}
		run = append(run, o)
	}
	// A tool's side effect never happens for a turn whose RUNNING record is not on disk. A step
	// whose calls all declare that they change nothing runs at once: a crash before the record
	// leaves nothing for the sweep to end, and the step's write still lands after the record.
	if !t.readOnly(run) {
		if err := t.awaitRecord(ctx); err != nil {
			return err
		}
	}
	// The calls run at once; the last on this goroutine, which would only wait: a step's one
	// call (the common case) then starts no goroutine, whose stack grew by copying through the
	// in-process call chain, and needs no hand-off back.
	var wg sync.WaitGroup
	for i, o := range run {
		if i == len(run)-1 {
			o.result = t.execute(ctx, o)
			break
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
		cmd := md
		if o.modelID != o.call.ID {
			cmd = map[string]string{"turn_id": t.id, "model_call_id": o.modelID}
		}
		msgs = append(msgs, &sessionv1.NewMessage{Role: sessionv1.Role_ROLE_ASSISTANT, Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL,
			Content: o.call.Arguments, ToolCallId: o.call.ID, ToolName: o.call.Name, ClientId: fmt.Sprintf("%s:%d:call:%d", t.id, step, i), Metadata: cmd})
	}
	content := make([]string, len(outs))
	for i, o := range outs {
		content[i] = toolResultContent(o.result)
		msgs = append(msgs, &sessionv1.NewMessage{Role: sessionv1.Role_ROLE_TOOL, Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT,
			Content: content[i], ToolCallId: o.call.ID, ToolName: o.call.Name, ClientId: fmt.Sprintf("%s:%d:result:%d", t.id, step, i), Metadata: md})
	}
	stored := func(out []*sessionv1.Message, err error) error {
		if err != nil {
			return err
		}
		for _, m := range out {
			t.blocks.currentTokens += m.GetTokenCount()
		}
		t.recordSteps(outs)
		return nil
	}
	t.addStep(resp.Content, outs, content)
	if ctx.Err() != nil || !allSucceeded(outs) {
		// A failed call may end the turn here (checkFailures): the next model call must not be
		// made before that is known.
		if err := stored(t.append(ctx, msgs)); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return t.checkFailures(outs)
	}
	// The step's write waits for the next model call, which needs only the step's messages
	// (addStep): when that call gives the turn's answer, the answer's append stores the step
	// with it (storeAnswer), one write of the session instead of two, which under load often
	// went into two commits. A call that takes longer than StepHold, or asks for more tools, or a
	// turn that ends otherwise, has the step written first (heldStep.wait): a crash loses a
	// finished step only within StepHold and the deferred write's commit. A step of more than
	// maxHeldStepBytes is written at once.
	h := &heldStep{msgs: msgs, done: make(chan struct{})}
	for _, m := range msgs {
		h.bytes += len(m.GetContent())
	}
	h.write = func() {
		defer close(h.done)
		wctx, cancel := detached(ctx)
		defer cancel()
		h.out, h.err = t.append(wctx, msgs)
	}
	h.after = func(out []*sessionv1.Message) error {
		if h.counted {
			out = nil // the step's announcement counted it before it was stored
		}
		if err := stored(out, nil); err != nil {
			return err
		}
		return t.checkFailures(outs) // every call succeeded: it only clears their failures
	}
	if t.s.cfg.StepHold > 0 && h.bytes <= maxHeldStepBytes {
		h.timer = time.AfterFunc(t.s.cfg.StepHold, h.start(t))
	} else {
		h.start(t)()
	}
	t.held = h
	t.storing = func() error {
		t.held = nil
		h.wait(t)
		if h.err != nil {
			return h.err
		}
		return h.after(h.out)
	}
	return nil
}

// maxHeldStepBytes is the most text a step may have for its write to wait for the answer. A
// step's announcement that finds it held counts it (the session service counts it again when it
// stores it): this bounds that second count, which costs a few milliseconds for 64 KiB of text.
const maxHeldStepBytes = 16 << 10

// heldStep is the write of a tool step that waits for the answer (runTools). Its state moves
// once, under the turn's mu: from held to written (the timer or wait started the write) or to
// taken (the answer's append stores the messages).
type heldStep struct {
	msgs []*sessionv1.NewMessage
	// bytes is the text of msgs.
	bytes int
	// timer starts the write after Config.StepHold (nil: it started at once).
	timer *time.Timer
	// write stores msgs into out and err, then closes done; after is what follows the step's
	// storing, given the stored messages, whichever write stored them.
	write func()
	after func(out []*sessionv1.Message) error
	done  chan struct{}
	out   []*sessionv1.Message
	err   error
	// counted says the step's announcement counted msgs while the write was held; the turn's
	// goroutine's own.
	counted bool
	started bool // the turn's mu guards started and taken
	taken   bool
}

// start returns the function that starts the write on a worker unless it started or was taken.
func (h *heldStep) start(t *turn) func() {
	return func() {
		t.mu.Lock()
		run := !h.started && !h.taken
		h.started = true
		t.mu.Unlock()
		if run {
			t.s.workers.Go(h.write)
		}
	}
}

// wait starts the write if it has not started and waits for it.
func (h *heldStep) wait(t *turn) {
	h.stopTimer()
	h.start(t)()
	<-h.done
}

// pending reports whether h holds a write that has not started.
func (h *heldStep) pending(t *turn) bool {
	if h == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return !h.started && !h.taken
}

// maxCombinedBytes is the most text a step and the answer stored with it may have together: a
// larger step is written alone, first, so that the append stays well within the session
// service's limit of a batch (4 MiB) whatever the answer's length.
const maxCombinedBytes = 1 << 20

// take reports whether the write had not started and the step and an answer of answerBytes fit in
// one append; the write will then never start, and the caller stores msgs.
func (h *heldStep) take(t *turn, answerBytes int) bool {
	if h.bytes+answerBytes > maxCombinedBytes {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if h.started {
		return false
	}
	h.taken = true
	h.stopTimer()
	return true
}

// stopTimer stops the timer that starts the write, if there is one.
func (h *heldStep) stopTimer() {
	if h.timer != nil {
		h.timer.Stop()
	}
}

// stepTokens counts a step's messages as the session service counts them when it stores them.
func (t *turn) stepTokens(msgs []*sessionv1.NewMessage) int32 {
	var n int32
	for _, m := range msgs {
		n += int32(t.s.deps.Tokenizer.CountStored(m.GetToolName(), m.GetContent()))
	}
	return n
}

// readOnly reports whether every call of run is of a known tool whose annotations say it does
// not modify its environment (the hint the tool service also trusts to retry a call).
func (t *turn) readOnly(run []*outcome) bool {
	for _, o := range run {
		if !t.byName[o.call.Name].GetSpec().GetAnnotations().GetReadOnlyHint() {
			return false
		}
	}
	return true
}

// allSucceeded reports whether every call of a step succeeded.
func allSucceeded(outs []*outcome) bool {
	for _, o := range outs {
		if !o.result.GetSuccess() {
			return false
		}
	}
	return true
}

// awaitStep waits for the write of the previous step, if it still runs (runTools), and returns
// what storing it returned. Only the turn's goroutine calls it.
func (t *turn) awaitStep() error {
	f := t.storing
	if f == nil {
		return nil
	}
	t.storing = nil
	return f()
}

// startCall fills missing required arguments from memory where the user's message allows it
// (turn.fill), derives the idempotency key, and announces the call.
func (t *turn) startCall(ctx context.Context, step int32, c model.ToolCall) *outcome {
	tool := t.byName[c.Name]
	var filled []*orchestratorv1.FilledArgument
	var decisions []*orchestratorv1.FillDecision
	var held *toolsv1.ToolResult
	if tool != nil {
		c.Arguments, filled, decisions, held = t.fill(ctx, tool, c.Arguments)
	}
	started := &orchestratorv1.ToolCallStarted{CallId: c.ID, Name: c.Name, Arguments: c.Arguments, Filled: filled, Step: step,
		FillDecisions: decisions, Held: held != nil}
	if tool.GetSpec().GetIdempotent() {
		started.IdempotencyKey = IdempotencyKey(t.session, c.Name, c.Arguments)
	}
	t.em.emit(&orchestratorv1.TurnEvent{Event: &orchestratorv1.TurnEvent_ToolCall{ToolCall: started}})
	return &outcome{call: c, started: started, held: held}
}

// execute runs one call through the tool service. A failure to reach the service becomes a
// failed result the model sees; a cancelled turn gives a "cancelled" result.
func (t *turn) execute(ctx context.Context, o *outcome) *toolsv1.ToolResult {
	ctx, span := t.s.tracer.Start(ctx, "orchestrator.tool", trace.WithAttributes(attribute.String("hermes.tool", o.call.Name)))
	defer span.End()
	start := time.Now()
	req := &toolsv1.ExecuteToolRequest{
		Name: o.call.Name, Arguments: o.call.Arguments, CallId: o.call.ID,
		SessionId: t.session, UserId: t.user, IdempotencyKey: o.started.GetIdempotencyKey(),
	}
	var resp *toolsv1.ExecuteToolResponse
	var err error
	if reportsProgress(t.byName[o.call.Name].GetSpec()) {
		resp, err = t.executeStream(ctx, o, req)
	} else {
		// Nothing to stream: the unary call runs on this goroutine in process, where a stream
		// takes a goroutine and a hand-off per message.
		resp, err = t.s.deps.Tools.ExecuteTool(ctx, req)
	}
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

// Tool progress reaches the turn's events at most every progressEvery per call (a changed
// message always does), and at most maxProgressEvents times, since events are recorded.
const (
	progressEvery     = 200 * time.Millisecond
	maxProgressEvents = 100
)

// reportsProgress reports whether a tool's calls may send progress or ask the user something
// (an MCP tool, or a tool this turn does not know): those run through ExecuteToolStream.
// Builtin and HTTP tools only return their result.
func reportsProgress(spec *toolsv1.ToolSpec) bool {
	return spec.GetBuiltin() == nil && spec.GetHttp() == nil
}

// executeStream runs a call through ExecuteToolStream, emitting the progress the tool reports
// as ToolProgress events.
func (t *turn) executeStream(ctx context.Context, o *outcome, req *toolsv1.ExecuteToolRequest) (*toolsv1.ExecuteToolResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := t.s.deps.Tools.ExecuteToolStream(ctx, &toolsv1.ExecuteToolStreamRequest{Request: req})
	if err != nil {
		return nil, err
	}
	var last time.Time
	lastMsg, sent := "", 0
	for {
		ev, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, errclass.New(errclass.Unavailable, "the tool service ended the call without a result", nil)
			}
			return nil, err
		}
		if r := ev.GetResponse(); r != nil {
			return r, nil
		}
		p := ev.GetProgress()
		e := p.GetElicitation()
		// A request for the user's input always goes out: the tool waits for its answer.
		if p == nil || (e == nil && (sent >= maxProgressEvents || (p.GetMessage() == lastMsg && time.Since(last) < progressEvery))) {
			continue
		}
		last, lastMsg = time.Now(), p.GetMessage()
		sent++
		tp := &orchestratorv1.ToolProgress{
			CallId: o.call.ID, Name: o.call.Name, Progress: p.GetProgress(), Total: p.GetTotal(), Message: clip(p.GetMessage(), 500),
		}
		if e != nil {
			// The owner answers with AnswerElicitation, which finds the turn by its RUNNING
			// record: stored before TurnStarted, so an answer sent at once finds the turn.
			tp.Elicitation = &orchestratorv1.Elicitation{Id: e.GetId(), Server: e.GetServer(), Message: e.GetMessage(), RequestedSchema: e.GetRequestedSchema(), Url: e.GetUrl(), ExpiresAt: e.GetExpiresAt()}
		}
		t.em.emit(&orchestratorv1.TurnEvent{Event: &orchestratorv1.TurnEvent_ToolProgress{ToolProgress: tp}})
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
		fin.ErrorCode, fin.Error, fin.AuthorizationUrl = code, r.GetError().GetMessage(), r.GetError().GetAuthorizationUrl()
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

// addStep adds a stored step to the current turn's messages for the next model request. The
// new step keeps the provider's call ids (its next request answers them); the step before it
// switches to the stored ids, unique in the session.
func (t *turn) addStep(text string, outs []*outcome, content []string) {
	cur := t.blocks.current
	if prev := t.lastStep; prev.ids != nil && prev.from < len(cur) {
		for i := range cur[prev.from].ToolCalls {
			c := &cur[prev.from].ToolCalls[i]
			c.ID = prev.ids[c.ID]
		}
		for i := prev.from + 1; i < len(cur) && cur[i].Role == model.RoleTool; i++ {
			cur[i].ToolCallID = prev.ids[cur[i].ToolCallID]
		}
	}
	next := stepIDs{from: len(cur), ids: make(map[string]string, len(outs))}
	assistant := model.Message{Role: model.RoleAssistant, Content: text}
	for _, o := range outs {
		c := o.call
		c.ID = o.modelID
		next.ids[o.modelID] = o.call.ID
		assistant.ToolCalls = append(assistant.ToolCalls, c)
	}
	cur = append(cur, assistant)
	for i, o := range outs {
		cur = append(cur, model.Message{Role: model.RoleTool, ToolCallID: o.modelID, Content: clipBytes(content[i], t.s.cfg.MaxMessageBytes)})
	}
	if t.takesImages() {
		if m, ok := toolImages(outs); ok {
			cur = append(cur, m)
		}
	}
	t.blocks.current, t.lastStep = cur, next
}

// takesImages reports whether the turn's model is one the operator listed as taking images.
func (t *turn) takesImages() bool {
	for _, m := range t.s.cfg.ImageModels {
		if m == "*" || m == t.model {
			return true
		}
	}
	return false
}

// toolImages is the user message that shows a model the images the step's tools returned: Chat
// Completions tool messages carry only text, so the images follow them as image parts, each
// named by its tool call. They stay in the turn's context only; the session keeps the text.
func toolImages(outs []*outcome) (model.Message, bool) {
	m := model.Message{Role: model.RoleUser}
	var names []string
	for _, o := range outs {
		if !o.result.GetSuccess() {
			continue
		}
		n := 0
		for _, md := range o.result.GetMedia() {
			if md.GetType() == "image" && len(md.GetData()) > 0 && strings.HasPrefix(md.GetMimeType(), "image/") {
				m.Images = append(m.Images, model.Image{MIMEType: md.GetMimeType(), Data: md.GetData()})
				n++
			}
		}
		if n > 0 {
			names = append(names, fmt.Sprintf("%d from %s (call %s)", n, o.call.Name, o.modelID))
		}
	}
	if len(m.Images) == 0 {
		return model.Message{}, false
	}
	m.Content = "The images the tools returned, in order: " + strings.Join(names, "; ") + "."
	return m, true
}

// recordSteps keeps the step's successful calls for the task state, stored with the turn's end.
func (t *turn) recordSteps(outs []*outcome) {
	for _, o := range outs {
		if !o.result.GetSuccess() {
			continue
		}
		args, err := CanonicalJSON(o.call.Arguments)
		if err != nil {
			args = o.call.Arguments
		}
		_, gist := resultGist(toolResultContent(o.result))
		st := Step{
			Tool: o.call.Name, Arguments: args, Result: clip(gist, resultPreviewRunes), TurnID: t.id, CallID: o.call.ID,
			IdempotencyKey: o.started.GetIdempotencyKey(), Replayed: o.result.GetReplayed(), At: t.s.now().UTC(),
		}
		t.mu.Lock()
		t.done = append(t.done, st)
		t.mu.Unlock()
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
