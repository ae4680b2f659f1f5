package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hermes-agent/hermes/internal/lease"
	"github.com/hermes-agent/hermes/internal/model"
	"github.com/hermes-agent/hermes/internal/tokenizer"
	eventsv1 "github.com/hermes-agent/hermes/proto/hermes/events/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// The agent loop's unit tests run the orchestrator against fakes — a model, a session service
// and a tool service in memory — inside a synctest bubble, whose clock is fake: leases expire,
// renewals tick and summary back-offs pass without waiting.

// fakeModel answers each request with reply; it counts the calls.
type fakeModel struct {
	mu    sync.Mutex
	calls []model.Request
	reply func(ctx context.Context, req model.Request) (*model.Response, error)
}

func (m *fakeModel) Model() string { return "fake" }

func (m *fakeModel) Complete(ctx context.Context, req model.Request) (*model.Response, error) {
	m.mu.Lock()
	m.calls = append(m.calls, req)
	m.mu.Unlock()
	return m.reply(ctx, req)
}

func (m *fakeModel) Stream(ctx context.Context, req model.Request, onDelta func(string)) (*model.Response, error) {
	resp, err := m.Complete(ctx, req)
	if err == nil && resp.Content != "" {
		onDelta(resp.Content)
	}
	return resp, err
}

func (m *fakeModel) count(summary bool) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, r := range m.calls {
		if isSummary(r) == summary {
			n++
		}
	}
	return n
}

func isSummary(r model.Request) bool {
	return len(r.Messages) > 0 && r.Messages[0].Content == SummarySystemPrompt
}

// fakeSession is a session service in memory: one log per session; BuildContext returns the
// whole log as the window, or with evict set, everything before the last user message as
// evicted (once per summary).
type fakeSession struct {
	sessionv1.SessionServiceClient
	mu      sync.Mutex
	log     map[string][]*sessionv1.Message
	summary map[string]*sessionv1.Message
	evict   bool
}

func newFakeSession() *fakeSession {
	return &fakeSession{log: map[string][]*sessionv1.Message{}, summary: map[string]*sessionv1.Message{}}
}

func (f *fakeSession) AppendMessages(_ context.Context, req *sessionv1.AppendMessagesRequest, _ ...grpc.CallOption) (*sessionv1.AppendMessagesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &sessionv1.AppendMessagesResponse{}
	for _, nm := range req.GetMessages() {
		m := &sessionv1.Message{
			Role: nm.GetRole(), Kind: nm.GetKind(), Content: nm.GetContent(), ToolCallId: nm.GetToolCallId(), ToolName: nm.GetToolName(),
			ClientId: nm.GetClientId(), Metadata: nm.GetMetadata(), Seq: int64(len(f.log[req.GetSessionId()]) + 1), TokenCount: 10,
		}
		f.log[req.GetSessionId()] = append(f.log[req.GetSessionId()], m)
		resp.Messages = append(resp.Messages, m)
	}
	return resp, nil
}

func (f *fakeSession) BuildContext(_ context.Context, req *sessionv1.BuildContextRequest, _ ...grpc.CallOption) (*sessionv1.BuildContextResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	msgs := f.log[req.GetSessionId()]
	resp := &sessionv1.BuildContextResponse{Window: msgs, Summary: f.summary[req.GetSessionId()]}
	if f.evict && len(msgs) > 1 {
		last := msgs[len(msgs)-1]
		from := resp.GetSummary().GetSeq()
		for _, m := range msgs[:len(msgs)-1] {
			if m.GetSeq() > from {
				resp.Evicted = append(resp.Evicted, m)
			}
		}
		resp.Window = []*sessionv1.Message{last}
	}
	return resp, nil
}

func (f *fakeSession) UpdateSummary(_ context.Context, req *sessionv1.UpdateSummaryRequest, _ ...grpc.CallOption) (*sessionv1.UpdateSummaryResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := &sessionv1.Message{Kind: sessionv1.MessageKind_MESSAGE_KIND_SUMMARY, Content: req.GetContent(), Seq: req.GetThroughSeq()}
	f.summary[req.GetSessionId()] = m
	return &sessionv1.UpdateSummaryResponse{Summary: m}, nil
}

func (f *fakeSession) messages(sid string) []*sessionv1.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*sessionv1.Message(nil), f.log[sid]...)
}

// fakeTools offers one tool, "calc", and runs it with exec.
type fakeTools struct {
	toolsv1.ToolServiceClient
	exec func(ctx context.Context, req *toolsv1.ExecuteToolRequest) (*toolsv1.ToolResult, error)
}

var calcTool = &toolsv1.Tool{Spec: &toolsv1.ToolSpec{Name: "calc", Description: "calculator", InputSchema: `{"type":"object"}`}, SchemaTokens: 20}

func (f *fakeTools) SelectTools(context.Context, *toolsv1.SelectToolsRequest, ...grpc.CallOption) (*toolsv1.SelectToolsResponse, error) {
	return &toolsv1.SelectToolsResponse{Tools: []*toolsv1.SelectedTool{{Tool: calcTool}}, AllTools: true}, nil
}

func (f *fakeTools) ExecuteTool(ctx context.Context, req *toolsv1.ExecuteToolRequest, _ ...grpc.CallOption) (*toolsv1.ExecuteToolResponse, error) {
	r, err := f.exec(ctx, req)
	return &toolsv1.ExecuteToolResponse{Result: r}, err
}

// fakeStream collects a RunTurn stream's events; onSend runs for each.
type fakeStream struct {
	grpc.ServerStream
	ctx    context.Context
	mu     sync.Mutex
	events []*orchestratorv1.TurnEvent
	onSend func(*orchestratorv1.TurnEvent)
}

func (s *fakeStream) Context() context.Context { return s.ctx }

func (s *fakeStream) Send(r *orchestratorv1.RunTurnResponse) error {
	if s.onSend != nil {
		s.onSend(r.GetEvent())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, r.GetEvent())
	return nil
}

func (s *fakeStream) final() *orchestratorv1.TurnEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.events) == 0 {
		return nil
	}
	return s.events[len(s.events)-1]
}

// loop is one orchestrator over fakes.
type loop struct {
	svc       *Service
	store     *BoltStore
	model     *fakeModel
	session   *fakeSession // nil over a real session service (newLoopOn)
	tools     *fakeTools
	published chan *eventsv1.TurnFinished
}

var testTokenizer = sync.OnceValues(func() (*tokenizer.Tokenizer, error) { return tokenizer.New("o200k_base") })

// newLoop must be called inside the bubble; it closes the service when the test ends.
func newLoop(t *testing.T, cfg Config, reply func(ctx context.Context, req model.Request) (*model.Response, error)) *loop {
	t.Helper()
	fake := newFakeSession()
	l := newLoopOn(t, cfg, fake, reply)
	l.session = fake
	return l
}

// newLoopOn is newLoop over the given session service.
func newLoopOn(t *testing.T, cfg Config, sessions sessionv1.SessionServiceClient, reply func(ctx context.Context, req model.Request) (*model.Response, error)) *loop {
	t.Helper()
	return newLoopWith(t, cfg, sessions, reply, nil)
}

// newLoopWith is newLoopOn with the service's store wrapped by wrap, when set (l.store stays the
// file underneath).
func newLoopWith(t *testing.T, cfg Config, sessions sessionv1.SessionServiceClient, reply func(ctx context.Context, req model.Request) (*model.Response, error), wrap func(Store) Store) *loop {
	t.Helper()
	tok, err := testTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	store, err := OpenBoltStore(filepath.Join(t.TempDir(), "orchestrator.db"))
	if err != nil {
		t.Fatal(err)
	}
	l := &loop{store: store, model: &fakeModel{reply: reply}, published: make(chan *eventsv1.TurnFinished, 16)}
	l.tools = &fakeTools{exec: func(context.Context, *toolsv1.ExecuteToolRequest) (*toolsv1.ToolResult, error) {
		return &toolsv1.ToolResult{Success: true, Output: `{"result":42}`}, nil
	}}
	cfg.Stream = true
	var svcStore Store = store
	if wrap != nil {
		svcStore = wrap(store)
	}
	l.svc, err = NewService(cfg, Options{
		Session: sessions, Tools: l.tools, Model: l.model, Tokenizer: tok, Store: svcStore,
		Publish: func(_ context.Context, ev *eventsv1.TurnFinished, data []byte) error {
			// What goes out is data when given (the outbox entry's encoding): the tests read it.
			if data != nil {
				sent := &eventsv1.TurnFinished{}
				if err := proto.Unmarshal(data, sent); err != nil {
					return err
				}
				if !proto.Equal(sent, ev) {
					return fmt.Errorf("encoding %v of event %v", sent, ev)
				}
				ev = sent
			}
			l.published <- ev
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.svc.Close(time.Second); _ = store.Close() })
	return l
}

// run plays one turn through RunTurn.
func (l *loop) run(t *testing.T, sid, text string, onSend func(*orchestratorv1.TurnEvent)) *fakeStream {
	t.Helper()
	st := &fakeStream{ctx: context.Background(), onSend: onSend}
	if err := l.svc.RunTurn(&orchestratorv1.RunTurnRequest{SessionId: sid, UserId: "u", Text: text, Options: &orchestratorv1.TurnOptions{SkipMemory: true}}, st); err != nil {
		t.Fatalf("RunTurn: %v", err)
	}
	return st
}

// toolThenAnswer asks for calc once per turn, then answers.
func toolThenAnswer(_ context.Context, req model.Request) (*model.Response, error) {
	if isSummary(req) {
		return &model.Response{Content: `{"goal":"g","decisions":[],"facts":["f"],"open_items":[]}`}, nil
	}
	if last := req.Messages[len(req.Messages)-1]; last.Role == model.RoleTool {
		return &model.Response{Content: "42", Usage: model.Usage{PromptTokens: 100, CompletionTokens: 2, Reported: true}}, nil
	}
	return &model.Response{ToolCalls: []model.ToolCall{{ID: "call_0", Name: "calc", Arguments: `{"x":1}`}}, Usage: model.Usage{PromptTokens: 90, CompletionTokens: 5, Reported: true}}, nil
}

// TestLoopFinish: a completed turn stores its record, task state and event in one write, then
// releases the session's lease before the final event reaches the client, then publishes.
func TestLoopFinish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLoop(t, Config{}, toolThenAnswer)
		var freeAtFinal bool
		st := l.run(t, "s1", "what is 6*7?", func(ev *orchestratorv1.TurnEvent) {
			if ev.GetCompleted() != nil {
				c, err := l.store.Leases().Acquire(context.Background(), sessionKey("s1"), "next-turn", nil, time.Second)
				freeAtFinal = err == nil && c.State == lease.Acquired
				_, _ = l.store.Leases().Release(context.Background(), sessionKey("s1"), "next-turn")
			}
		})
		done := st.final().GetCompleted()
		if done == nil {
			t.Fatalf("final event %v", st.final())
		}
		if !freeAtFinal {
			t.Error("the session's lease was still held when TurnCompleted was sent")
		}
		rec, err := l.store.GetTurn(context.Background(), done.GetTurnId())
		if err != nil {
			t.Fatal(err)
		}
		if rec.GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_COMPLETED || rec.GetAnswer() != "42" || len(rec.GetToolCalls()) != 1 {
			t.Errorf("record: %v", rec)
		}
		if got := rec.GetEvents()[len(rec.GetEvents())-1]; !proto.Equal(got, st.final()) {
			t.Errorf("the record's last event %v, want the final event %v", got, st.final())
		}
		want := &orchestratorv1.Usage{PromptTokens: 190, CompletionTokens: 7, TotalTokens: 197, ModelCalls: 2, Source: "provider"}
		if !proto.Equal(rec.GetUsage(), want) {
			t.Errorf("usage %v, want %v", rec.GetUsage(), want)
		}
		ts, _ := l.store.TaskState(context.Background(), "s1")
		if len(ts.Done) != 1 || ts.Done[0].Tool != "calc" || ts.Done[0].CallID != storedCallID(done.GetTurnId(), 1, 0) {
			t.Errorf("task state %+v", ts)
		}
		ev := <-l.published
		if ev.GetTurnId() != done.GetTurnId() {
			t.Errorf("published %v", ev)
		}
		synctest.Wait() // the publish removed its outbox entry
		if out, _ := l.store.Outbox(context.Background(), 10); len(out) != 0 {
			t.Errorf("outbox keeps %d entries after the publish", len(out))
		}
		// The stored call has the session-unique id; the provider's is in its metadata.
		var call *sessionv1.Message
		for _, m := range l.session.messages("s1") {
			if m.GetKind() == sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL {
				call = m
			}
		}
		if call.GetToolCallId() != storedCallID(done.GetTurnId(), 1, 0) || call.GetMetadata()["model_call_id"] != "call_0" {
			t.Errorf("stored call %v", call)
		}
	})
}

// TestLoopRepeatedFailures: the same tool failing the same way MaxSameFailures times in a row
// ends the turn (ABORTED) with a closing message, and leaves the failure pending.
func TestLoopRepeatedFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLoop(t, Config{MaxSameFailures: 2}, func(_ context.Context, req model.Request) (*model.Response, error) {
			return &model.Response{ToolCalls: []model.ToolCall{{ID: "c", Name: "calc", Arguments: `{}`}}}, nil
		})
		l.tools.exec = func(context.Context, *toolsv1.ExecuteToolRequest) (*toolsv1.ToolResult, error) {
			return &toolsv1.ToolResult{Error: &toolsv1.ToolError{Code: toolsv1.ErrorCode_ERROR_CODE_EXECUTION, Message: "boom"}}, nil
		}
		st := l.run(t, "s1", "compute", nil)
		failed := st.final().GetFailed()
		if failed.GetCode() != "ABORTED" || failed.GetSteps() != 2 {
			t.Fatalf("final event %v, want ABORTED after 2 steps", st.final())
		}
		msgs := l.session.messages("s1")
		if last := msgs[len(msgs)-1]; !strings.HasPrefix(last.GetContent(), "I could not finish this") {
			t.Errorf("last message %q, want the closing message", last.GetContent())
		}
		ts, _ := l.store.TaskState(context.Background(), "s1")
		var what []string
		for _, p := range ts.Pending {
			what = append(what, strings.SplitN(p.What, ":", 2)[0])
		}
		if diff := cmp.Diff([]string{"unfinished request", "calc failed (execution)"}, what); diff != "" {
			t.Errorf("pending (-want +got):\n%s", diff)
		}
	})
}

// TestLoopAuthorizationURL: a tool that fails because the user has not connected their account
// on a per-user OAuth MCP server gives the turn's ToolCallFinished the link as its own field, so
// a client can show it as a button; other failures carry none.
func TestLoopAuthorizationURL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		l := newLoop(t, Config{}, func(_ context.Context, req model.Request) (*model.Response, error) {
			calls++
			if calls > 2 {
				return &model.Response{Content: "please connect your account"}, nil
			}
			return &model.Response{ToolCalls: []model.ToolCall{{ID: fmt.Sprint("c", calls), Name: "calc", Arguments: `{}`}}}, nil
		})
		const link = "https://as.example/authorize?state=s"
		n := 0
		l.tools.exec = func(context.Context, *toolsv1.ExecuteToolRequest) (*toolsv1.ToolResult, error) {
			n++
			if n == 1 {
				return &toolsv1.ToolResult{Error: &toolsv1.ToolError{Code: toolsv1.ErrorCode_ERROR_CODE_EXECUTION, Message: "connect your account: " + link, AuthorizationUrl: link}}, nil
			}
			return &toolsv1.ToolResult{Error: &toolsv1.ToolError{Code: toolsv1.ErrorCode_ERROR_CODE_EXECUTION, Message: "boom"}}, nil
		}
		st := l.run(t, "s1", "compute", nil)
		var got []string
		for _, e := range st.events {
			if r := e.GetToolResult(); r != nil {
				got = append(got, r.GetAuthorizationUrl())
			}
		}
		if diff := cmp.Diff([]string{link, ""}, got); diff != "" {
			t.Errorf("authorization_url of the tool results (-want +got):\n%s", diff)
		}
	})
}

// TestLoopSummaryBackoff: after SummaryFailures failed summary calls the summarizer stops asking
// the model (extractive fallback) until the back-off has passed on the clock.
func TestLoopSummaryBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLoop(t, Config{SummaryFailures: 2, SummaryBackoff: time.Minute}, func(ctx context.Context, req model.Request) (*model.Response, error) {
			if isSummary(req) {
				return nil, errors.New("summary model down")
			}
			return &model.Response{Content: "ok"}, nil
		})
		l.session.evict = true
		turn := func(i int) { l.run(t, "s1", fmt.Sprint("turn ", i), nil) }
		turn(0) // nothing to evict yet
		turn(1)
		turn(2)
		if n := l.model.count(true); n != 2 {
			t.Fatalf("%d summary calls after two turns that evicted, want 2", n)
		}
		turn(3)
		if n := l.model.count(true); n != 2 {
			t.Errorf("backing off, yet the model was asked again (%d calls)", n)
		}
		time.Sleep(73 * time.Second) // the fake clock passes the back-off (a minute, +20% jitter at most)
		turn(4)
		if n := l.model.count(true); n != 3 {
			t.Errorf("%d summary calls after the back-off, want 3", n)
		}
	})
}

// renewLeases is a lease store whose renewals are counted and, while hold is open, wait: a
// renewal under way when its turn ends.
type renewLeases struct {
	lease.Store
	calls   *atomic.Int32
	entered chan struct{}
	hold    chan struct{}
}

func (l renewLeases) Renew(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	l.calls.Add(1)
	l.entered <- struct{}{}
	<-l.hold
	return l.Store.Renew(ctx, key, owner, ttl)
}

type renewStore struct {
	Store
	leases lease.Store
}

func (s renewStore) Leases() lease.Store { return s.leases }

// TestSessionHoldStop: a hold stopped before its first renewal never renews (a quick turn's end
// waits for nothing); one stopped during a renewal returns once the renewal has ended, and no
// renewal starts after it.
func TestSessionHoldStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		entered, hold := make(chan struct{}, 1), make(chan struct{})
		l := newLoopWith(t, Config{}, newFakeSession(), toolThenAnswer, func(s Store) Store {
			return renewStore{Store: s, leases: renewLeases{Store: s.Leases(), calls: &calls, entered: entered, hold: hold}}
		})
		ctx := context.Background()

		_, quick, err := l.svc.lockSession(ctx, "s1", "QUICK")
		if err != nil {
			t.Fatal(err)
		}
		if !quick.stop() {
			t.Error("the first stop reported the hold ended already")
		}
		if quick.stop() {
			t.Error("a second stop reported the hold still to end")
		}
		time.Sleep(3 * sessionLease)
		if n := calls.Load(); n != 0 {
			t.Errorf("a hold stopped before its first renewal renewed %d times", n)
		}
		_, _ = l.store.Leases().Release(ctx, sessionKey("s1"), "QUICK")

		_, slow, err := l.svc.lockSession(ctx, "s1", "SLOW")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(sessionLease / 3)
		<-entered // the first renewal is under way
		stopped := make(chan bool, 1)
		go func() { stopped <- slow.stop() }()
		synctest.Wait()
		select {
		case <-stopped:
			t.Fatal("stop returned while a renewal was under way")
		default:
		}
		close(hold)
		if !<-stopped {
			t.Error("stop reported the hold ended already")
		}
		time.Sleep(3 * sessionLease)
		if n := calls.Load(); n != 1 {
			t.Errorf("%d renewals, want 1: none after stop", n)
		}
	})
}

// TestLoopLeaseRenewalAndLoss: a turn longer than the session lease keeps it by renewing; a
// turn whose lease passed to another turn (its renewals failed for a whole lease) stops.
func TestLoopLeaseRenewalAndLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLoop(t, Config{}, toolThenAnswer)
		ctx := context.Background()
		leases := l.store.Leases()
		probe := make(chan lease.State, 1)
		l.tools.exec = func(ctx context.Context, _ *toolsv1.ExecuteToolRequest) (*toolsv1.ToolResult, error) {
			time.Sleep(3 * sessionLease) // a slow tool, on the fake clock
			c, _ := leases.Acquire(ctx, sessionKey("s1"), "intruder", nil, time.Second)
			probe <- c.State
			return &toolsv1.ToolResult{Success: true, Output: `1`}, nil
		}
		if st := l.run(t, "s1", "slow", nil); st.final().GetCompleted() == nil {
			t.Fatalf("a long turn did not complete: %v", st.final())
		}
		if s := <-probe; s != lease.Held {
			t.Errorf("after 3 leases' time the lease was %v, want still held by the renewing turn", s)
		}

		// Now the tool waits while the lease is taken from the turn.
		stolen := make(chan struct{})
		l.tools.exec = func(ctx context.Context, req *toolsv1.ExecuteToolRequest) (*toolsv1.ToolResult, error) {
			turnID := strings.SplitN(req.GetCallId(), "-", 2)[0]
			_, _ = leases.Release(context.Background(), sessionKey("s1"), strings.ToUpper(turnID))
			_, _ = leases.Acquire(context.Background(), sessionKey("s1"), "thief", nil, time.Hour)
			close(stolen)
			<-ctx.Done()
			return nil, ctx.Err()
		}
		st := l.run(t, "s1", "slow again", nil)
		<-stolen
		failed := st.final().GetFailed()
		if failed.GetCode() != "ABORTED" || !strings.Contains(failed.GetMessage(), "lease") {
			t.Errorf("final event %v, want ABORTED for the lost lease", st.final())
		}
		if ok, _ := leases.Release(ctx, sessionKey("s1"), "thief"); !ok {
			t.Error("the turn that lost its lease released the new holder's")
		}
	})
}

// TestLoopCancel: CancelTurn during a tool call ends the turn CANCELLED with who cancelled it,
// the call stored with a result, and the usage so far.
func TestLoopCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLoop(t, Config{}, toolThenAnswer)
		running := make(chan string, 1)
		l.tools.exec = func(ctx context.Context, req *toolsv1.ExecuteToolRequest) (*toolsv1.ToolResult, error) {
			running <- req.GetCallId()
			<-ctx.Done()
			return nil, ctx.Err()
		}
		res := make(chan *fakeStream, 1)
		go func() { res <- l.run(t, "s1", "slow", nil) }()
		callID := <-running
		turnID := strings.ToUpper(strings.SplitN(callID, "-", 2)[0])
		resp, err := l.svc.CancelTurn(context.Background(), &orchestratorv1.CancelTurnRequest{TurnId: turnID, UserId: "u", Reason: "stop"})
		if err != nil {
			t.Fatal(err)
		}
		st := <-res
		rec := resp.GetTurn()
		if rec.GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_CANCELLED || rec.GetCancelledBy() != "user:u" || rec.GetUsage().GetModelCalls() != 1 {
			t.Errorf("record %v", rec)
		}
		if f := st.final().GetFailed(); f.GetCode() != "CANCELLED" {
			t.Errorf("final event %v", st.final())
		}
		var kinds []sessionv1.MessageKind
		for _, m := range l.session.messages("s1") {
			kinds = append(kinds, m.GetKind())
		}
		want := []sessionv1.MessageKind{sessionv1.MessageKind_MESSAGE_KIND_TEXT, sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL, sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT}
		if diff := cmp.Diff(want, kinds); diff != "" {
			t.Errorf("session (-want +got):\n%s", diff)
		}
	})
}

// TestListTurnsRunningAndFinished: the embedded store lists the running turn (kept in memory)
// with the finished ones.
func TestListTurnsRunningAndFinished(t *testing.T) {
	s, err := OpenBoltStore(filepath.Join(t.TempDir(), "o.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	run := &orchestratorv1.Turn{Id: "R", SessionId: "s", Status: orchestratorv1.TurnStatus_TURN_STATUS_RUNNING, StartedAt: timestamppb.New(time.UnixMilli(50))}
	if err := s.PutTurn(ctx, run, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishTurn(ctx, &Finish{Turn: finished("F", "s", 10), TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	page, _, err := s.ListTurns(ctx, "s", "", 10)
	if err != nil || len(page) != 2 || page[0].GetId() != "R" || page[1].GetId() != "F" {
		t.Errorf("ListTurns = %v, %v", page, err)
	}
}

// ExecuteToolStream answers with ExecuteTool's result as the stream's one event.
func (f *fakeTools) ExecuteToolStream(ctx context.Context, req *toolsv1.ExecuteToolStreamRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[toolsv1.ExecuteToolStreamResponse], error) {
	r, err := f.ExecuteTool(ctx, req.GetRequest())
	if err != nil {
		return nil, err
	}
	return &oneEvent{ev: &toolsv1.ExecuteToolStreamResponse{Event: &toolsv1.ExecuteToolStreamResponse_Response{Response: r}}}, nil
}

// oneEvent is a server stream of one event.
type oneEvent struct {
	grpc.ClientStream
	ev *toolsv1.ExecuteToolStreamResponse
}

func (s *oneEvent) Recv() (*toolsv1.ExecuteToolStreamResponse, error) {
	if s.ev == nil {
		return nil, io.EOF
	}
	ev := s.ev
	s.ev = nil
	return ev, nil
}

// stallingSession is a session service whose next AppendMessages, once armed, runs stall first
// and then fails with the call's context error, as a gRPC call cut short by its context does.
type stallingSession struct {
	*fakeSession
	stall atomic.Pointer[func(ctx context.Context, req *sessionv1.AppendMessagesRequest)]
}

func (s *stallingSession) AppendMessages(ctx context.Context, req *sessionv1.AppendMessagesRequest, opts ...grpc.CallOption) (*sessionv1.AppendMessagesResponse, error) {
	if f := s.stall.Swap(nil); f != nil {
		(*f)(ctx, req)
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return s.fakeSession.AppendMessages(ctx, req, opts...)
}

// TestLoopLeaseLostDuringAWrite: a turn whose lease is lost while it stores its messages ends
// ABORTED for the lost lease, not CANCELLED for the write its ending cut short (seen under load:
// "storing the turn's messages: context canceled").
func TestLoopLeaseLostDuringAWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ss := &stallingSession{fakeSession: newFakeSession()}
		l := newLoopOn(t, Config{}, ss, toolThenAnswer)
		leases := l.store.Leases()
		stall := func(ctx context.Context, req *sessionv1.AppendMessagesRequest) {
			// The lease passes to another turn; the turn's next renewal finds it gone.
			turnID := req.GetMessages()[0].GetMetadata()["turn_id"]
			_, _ = leases.Release(context.Background(), sessionKey("s1"), strings.ToUpper(turnID))
			_, _ = leases.Acquire(context.Background(), sessionKey("s1"), "thief", nil, time.Hour)
			<-ctx.Done()
		}
		l.tools.exec = func(context.Context, *toolsv1.ExecuteToolRequest) (*toolsv1.ToolResult, error) {
			ss.stall.Store(&stall) // the tool step's write stalls
			return &toolsv1.ToolResult{Success: true, Output: `1`}, nil
		}
		st := l.run(t, "s1", "slow write", nil)
		failed := st.final().GetFailed()
		if failed.GetCode() != "ABORTED" || !strings.Contains(failed.GetMessage(), "lease") {
			t.Errorf("final event %v, want ABORTED for the lost lease", st.final())
		}
	})
}

// gatedRecord holds the write of a turn's RUNNING record until release is closed, then stores
// it, or fails with fail; written says the write ended, stored that the record is stored.
type gatedRecord struct {
	Store
	release chan struct{}
	fail    error
	written atomic.Bool
	stored  atomic.Bool
}

func (g *gatedRecord) PutTurn(ctx context.Context, turn *orchestratorv1.Turn, ttl time.Duration) error {
	if turn.GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_RUNNING {
		return g.Store.PutTurn(ctx, turn, ttl)
	}
	<-g.release
	defer g.written.Store(true)
	if g.fail != nil {
		return g.fail
	}
	err := g.Store.PutTurn(ctx, turn, ttl)
	g.stored.Store(err == nil)
	return err
}

// TestLoopRunningRecordOverlaps: the RUNNING record's write (commit A) runs while the turn makes
// its first model call, and gates the rest: no event reaches the client and no tool runs before
// the record is stored; a failed write fails the turn (UNAVAILABLE) and runs no tool. The write
// is released by the first model call, or a minute later (the turn's old order, which waited).
func TestLoopRunningRecordOverlaps(t *testing.T) {
	answer := func(context.Context, model.Request) (*model.Response, error) {
		return &model.Response{Content: "hi"}, nil
	}
	cases := []struct {
		name       string
		reply      func(ctx context.Context, req model.Request) (*model.Response, error)
		fail       error
		wantStatus orchestratorv1.TurnStatus
		wantTools  int32
	}{
		{"tool then answer", toolThenAnswer, nil, orchestratorv1.TurnStatus_TURN_STATUS_COMPLETED, 1},
		{"answer", answer, nil, orchestratorv1.TurnStatus_TURN_STATUS_COMPLETED, 0},
		{"tool, the record fails", toolThenAnswer, errors.New("disk full"), orchestratorv1.TurnStatus_TURN_STATUS_FAILED, 0},
		{"answer, the record fails", answer, errors.New("disk full"), orchestratorv1.TurnStatus_TURN_STATUS_FAILED, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := &gatedRecord{release: make(chan struct{}), fail: c.fail}
				var once sync.Once
				open := func() { once.Do(func() { close(g.release) }) }
				time.AfterFunc(time.Minute, open)
				var overlapped, early atomic.Bool
				l := newLoopWith(t, Config{}, newFakeSession(), func(ctx context.Context, req model.Request) (*model.Response, error) {
					if !g.written.Load() {
						overlapped.Store(true)
					}
					open()
					return c.reply(ctx, req)
				}, func(s Store) Store { g.Store = s; return g })
				var ran atomic.Int32
				l.tools.exec = func(context.Context, *toolsv1.ExecuteToolRequest) (*toolsv1.ToolResult, error) {
					if !g.stored.Load() {
						early.Store(true)
					}
					ran.Add(1)
					return &toolsv1.ToolResult{Success: true, Output: `1`}, nil
				}
				st := l.run(t, "s1", "go", func(*orchestratorv1.TurnEvent) {
					if !g.written.Load() {
						early.Store(true)
					}
				})
				if !overlapped.Load() {
					t.Error("the first model call waited for the RUNNING record's write")
				}
				if early.Load() {
					t.Error("an event was sent or a tool ran before the RUNNING record's write ended")
				}
				if n := ran.Load(); n != c.wantTools {
					t.Errorf("%d tool runs, want %d", n, c.wantTools)
				}
				st.mu.Lock()
				events := st.events
				st.mu.Unlock()
				if len(events) < 2 || events[0].GetStarted() == nil || events[0].GetSeq() != 1 {
					t.Fatalf("events %v, want TurnStarted first", events)
				}
				for i, ev := range events {
					if ev.GetSeq() != int32(i+1) {
						t.Errorf("event %d has seq %d: sent out of order", i, ev.GetSeq())
					}
				}
				id := events[0].GetStarted().GetTurnId()
				if c.fail != nil {
					// The message says what is unavailable (TestRedisRestartUnderLoad's check).
					if f := st.final().GetFailed(); f.GetCode() != "UNAVAILABLE" || !strings.Contains(f.GetMessage(), "record") || !strings.Contains(f.GetMessage(), "unavailable") {
						t.Errorf("final event %v, want UNAVAILABLE for the record, saying the store is unavailable", st.final())
					}
				}
				rec, err := l.store.GetTurn(context.Background(), id)
				if err != nil || rec.GetStatus() != c.wantStatus {
					t.Errorf("stored record %v, %v; want %v", rec.GetStatus(), err, c.wantStatus)
				}
			})
		})
	}
}

// rpcTools is fakeTools offering one tool of the given spec that records which RPC each call
// took; its stream sends one progress report before the result.
type rpcTools struct {
	fakeTools
	spec          *toolsv1.ToolSpec
	mu            sync.Mutex
	unary, stream int
}

func (f *rpcTools) SelectTools(context.Context, *toolsv1.SelectToolsRequest, ...grpc.CallOption) (*toolsv1.SelectToolsResponse, error) {
	return &toolsv1.SelectToolsResponse{Tools: []*toolsv1.SelectedTool{{Tool: &toolsv1.Tool{Spec: f.spec}}}, AllTools: true}, nil
}

func (f *rpcTools) ExecuteTool(ctx context.Context, req *toolsv1.ExecuteToolRequest, opts ...grpc.CallOption) (*toolsv1.ExecuteToolResponse, error) {
	f.mu.Lock()
	f.unary++
	f.mu.Unlock()
	return f.fakeTools.ExecuteTool(ctx, req, opts...)
}

func (f *rpcTools) ExecuteToolStream(ctx context.Context, req *toolsv1.ExecuteToolStreamRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[toolsv1.ExecuteToolStreamResponse], error) {
	f.mu.Lock()
	f.stream++
	f.mu.Unlock()
	r, err := f.fakeTools.ExecuteTool(ctx, req.GetRequest())
	if err != nil {
		return nil, err
	}
	return &progressThenResult{evs: []*toolsv1.ExecuteToolStreamResponse{
		{Event: &toolsv1.ExecuteToolStreamResponse_Progress{Progress: &toolsv1.ToolProgress{Progress: 1, Total: 2, Message: "half way"}}},
		{Event: &toolsv1.ExecuteToolStreamResponse_Response{Response: r}},
	}}, nil
}

// progressThenResult is a server stream of the given events.
type progressThenResult struct {
	grpc.ClientStream
	evs []*toolsv1.ExecuteToolStreamResponse
}

func (s *progressThenResult) Recv() (*toolsv1.ExecuteToolStreamResponse, error) {
	if len(s.evs) == 0 {
		return nil, io.EOF
	}
	ev := s.evs[0]
	s.evs = s.evs[1:]
	return ev, nil
}

// TestToolCallRPC: a call of a tool that can report progress or ask the user (an MCP tool, or
// one whose executor the turn does not know) goes through ExecuteToolStream, and its progress
// reaches the turn's events; a builtin or HTTP tool, which only returns its result, takes the
// unary ExecuteTool, which runs without a stream's goroutine and hand-offs in process.
func TestToolCallRPC(t *testing.T) {
	tests := []struct {
		name     string
		executor func(*toolsv1.ToolSpec)
		want     [2]int // unary, stream calls
	}{
		{"builtin", func(s *toolsv1.ToolSpec) {
			s.Executor = &toolsv1.ToolSpec_Builtin{Builtin: &toolsv1.BuiltinExecutor{Name: "calc"}}
		}, [2]int{1, 0}},
		{"http", func(s *toolsv1.ToolSpec) {
			s.Executor = &toolsv1.ToolSpec_Http{Http: &toolsv1.HTTPExecutor{Url: "https://tools.example/calc"}}
		}, [2]int{1, 0}},
		{"mcp", func(s *toolsv1.ToolSpec) {
			s.Executor = &toolsv1.ToolSpec_Mcp{Mcp: &toolsv1.MCPExecutor{Server: "github", Tool: "calc"}}
		}, [2]int{0, 1}},
		{"no executor", func(*toolsv1.ToolSpec) {}, [2]int{0, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newLoop(t, Config{}, toolThenAnswer)
				spec := &toolsv1.ToolSpec{Name: "calc", Description: "calculator", InputSchema: `{"type":"object"}`}
				tc.executor(spec)
				tools := &rpcTools{fakeTools: *l.tools, spec: spec}
				l.svc.deps.Tools = tools
				st := l.run(t, "s1", "what is 6*7?", nil)
				if st.final().GetCompleted() == nil {
					t.Fatalf("final event %v", st.final())
				}
				tools.mu.Lock()
				got := [2]int{tools.unary, tools.stream}
				tools.mu.Unlock()
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("calls (unary, stream) (-want +got):\n%s", diff)
				}
				progress := 0
				result := false
				for _, ev := range st.events {
					if ev.GetToolProgress() != nil {
						progress++
					}
					if r := ev.GetToolResult(); r != nil {
						result = r.GetSuccess() && r.GetOutput() == `{"result":42}`
					}
				}
				if progress != tc.want[1] {
					t.Errorf("%d ToolProgress events, want %d", progress, tc.want[1])
				}
				if !result {
					t.Error("no successful ToolResult event with the tool's output")
				}
			})
		})
	}
}
