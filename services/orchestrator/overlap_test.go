package orchestrator

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/hermes-agent/hermes/internal/model"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// gatedSteps is a session whose append of a tool step (it holds a tool result) waits until gate
// is closed, then fails with fail when set.
type gatedSteps struct {
	*fakeSession
	gate chan struct{}
	fail error
	// entered is closed when the step's append began, ended when it returned.
	entered, ended chan struct{}
}

func (g *gatedSteps) AppendMessages(ctx context.Context, req *sessionv1.AppendMessagesRequest, opts ...grpc.CallOption) (*sessionv1.AppendMessagesResponse, error) {
	for _, m := range req.GetMessages() {
		if m.GetKind() == sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT {
			defer close(g.ended)
			close(g.entered)
			select {
			case <-g.gate:
			case <-ctx.Done(): // the turn's deadline: a turn whose model call waits for this write
			}
			// A store that honours its caller's cancellation.
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if g.fail != nil {
				return nil, g.fail
			}
			break
		}
	}
	return g.fakeSession.AppendMessages(ctx, req, opts...)
}

// eventKinds names a stream's events in order, with the step of context and delta events.
func eventKinds(evs []*orchestratorv1.TurnEvent) []string {
	var out []string
	for _, ev := range evs {
		switch e := ev.GetEvent().(type) {
		case *orchestratorv1.TurnEvent_Started:
			out = append(out, "started")
		case *orchestratorv1.TurnEvent_Context:
			out = append(out, "context "+string(rune('0'+e.Context.GetStep())))
		case *orchestratorv1.TurnEvent_ToolCall:
			out = append(out, "tool call")
		case *orchestratorv1.TurnEvent_ToolResult:
			out = append(out, "tool result")
		case *orchestratorv1.TurnEvent_Delta:
			out = append(out, "delta "+string(rune('0'+e.Delta.GetStep())))
		case *orchestratorv1.TurnEvent_Completed:
			out = append(out, "completed")
		case *orchestratorv1.TurnEvent_Failed:
			out = append(out, "failed")
		default:
			out = append(out, "other")
		}
	}
	return out
}

// TestLoopStepWriteOverlapsModelCall: a tool step's write runs while the next model call is
// made (here the call outlasts Config.StepHold, so the held write starts during it; the session's
// append of the step waits until the model has the second request: the turn would never end if
// the call waited for the write), and the client sees the same events in the same order: the
// second step's context event after the write, counting the step's stored messages, before that
// step's text. A write that fails fails the turn with its
// error, as it did when the write came first: no event of the second step, one model call
// counted, no answer stored. A turn cancelled during the call keeps the step stored, as it did
// when the write ended before the call began, and counts the call.
func TestLoopStepWriteOverlapsModelCall(t *testing.T) {
	cases := []struct {
		name      string
		fail      error
		cancel    bool
		wantKinds []string
		wantCode  string
		wantCalls int32
		wantLog   []sessionv1.MessageKind
	}{
		{
			name:      "stored",
			wantKinds: []string{"started", "context 1", "tool call", "tool result", "context 2", "delta 2", "completed"},
			wantCalls: 2,
			wantLog: []sessionv1.MessageKind{sessionv1.MessageKind_MESSAGE_KIND_TEXT, sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL,
				sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT, sessionv1.MessageKind_MESSAGE_KIND_TEXT},
		},
		{
			name:      "the write fails",
			fail:      status.Error(codes.Unavailable, "disk gone"),
			wantKinds: []string{"started", "context 1", "tool call", "tool result", "failed"},
			wantCode:  "UNAVAILABLE",
			wantCalls: 1,
			wantLog:   []sessionv1.MessageKind{sessionv1.MessageKind_MESSAGE_KIND_TEXT},
		},
		{
			name:      "the turn is cancelled during the call",
			cancel:    true,
			wantKinds: []string{"started", "context 1", "tool call", "tool result", "context 2", "failed"},
			wantCode:  "CANCELLED",
			wantCalls: 2,
			wantLog: []sessionv1.MessageKind{sessionv1.MessageKind_MESSAGE_KIND_TEXT, sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL,
				sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := &gatedSteps{fakeSession: newFakeSession(), gate: make(chan struct{}), fail: c.fail, entered: make(chan struct{}), ended: make(chan struct{})}
				var once sync.Once
				client, cancelTurn := context.WithCancel(context.Background())
				defer cancelTurn()
				l := newLoopOn(t, Config{}, g, func(ctx context.Context, req model.Request) (*model.Response, error) {
					if last := req.Messages[len(req.Messages)-1]; last.Role == model.RoleTool {
						if c.cancel {
							// The step's write is under way when the cancellation reaches the
							// turn (and so this call).
							<-g.entered
							cancelTurn()
							<-ctx.Done()
						}
						once.Do(func() { close(g.gate) })
						// The answer comes after the write ended, so that a failed write is
						// known before it: what the client sees does not depend on timing.
						<-g.ended
						if err := ctx.Err(); err != nil {
							return nil, err
						}
					}
					return toolThenAnswer(ctx, req)
				})
				st := &fakeStream{ctx: client}
				if err := l.svc.RunTurn(&orchestratorv1.RunTurnRequest{SessionId: "s1", UserId: "u", Text: "what is 6*7?",
					Options: &orchestratorv1.TurnOptions{SkipMemory: true}}, st); err != nil {
					t.Fatalf("RunTurn: %v", err)
				}
				st.mu.Lock()
				events := st.events
				st.mu.Unlock()
				if diff := cmp.Diff(c.wantKinds, eventKinds(events)); diff != "" {
					t.Errorf("events (-want +got):\n%s", diff)
				}
				for i, ev := range events {
					if ev.GetSeq() != int32(i+1) {
						t.Errorf("event %d has seq %d", i, ev.GetSeq())
					}
					// The user message and the step's call and result, 10 tokens each (fakeSession).
					if cx := ev.GetContext(); cx.GetStep() == 2 && cx.GetTokens().GetCurrentMessage() != 30 {
						t.Errorf("step 2's context counts %d tokens of the current turn, want 30", cx.GetTokens().GetCurrentMessage())
					}
				}
				if f := st.final().GetFailed(); f.GetCode() != c.wantCode {
					t.Errorf("final event %v, want code %q", st.final(), c.wantCode)
				}
				id := events[0].GetStarted().GetTurnId()
				rec, err := l.store.GetTurn(context.Background(), id)
				if err != nil {
					t.Fatal(err)
				}
				if rec.GetUsage().GetModelCalls() != c.wantCalls {
					t.Errorf("the record counts %d model calls, want %d", rec.GetUsage().GetModelCalls(), c.wantCalls)
				}
				if got := rec.GetEvents()[len(rec.GetEvents())-1]; !proto.Equal(got, st.final()) {
					t.Errorf("the record's last event %v, want the final event %v", got, st.final())
				}
				var kinds []sessionv1.MessageKind
				for _, m := range g.messages("s1") {
					kinds = append(kinds, m.GetKind())
				}
				if diff := cmp.Diff(c.wantLog, kinds); diff != "" {
					t.Errorf("session log (-want +got):\n%s", diff)
				}
			})
		})
	}
}

// TestEmitterSendsOffTheTurn: the turn's emits return while the stream's send of an earlier
// event is still blocked (the emitter would wait here for ever if the turn sent them itself);
// the events reach the stream in order, the final one last (the events the sender had not taken
// yet are sent with it), and nothing after it.
func TestEmitterSendsOffTheTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		unblock := make(chan struct{})
		var mu sync.Mutex
		var sent []int32
		em := &emitter{sendFn: func(ev *orchestratorv1.TurnEvent) error {
			if ev.GetSeq() == 1 {
				<-unblock
			}
			mu.Lock()
			sent = append(sent, ev.GetSeq())
			mu.Unlock()
			return nil
		}}
		em.emit(&orchestratorv1.TurnEvent{})
		synctest.Wait() // the first send is blocked
		em.emit(&orchestratorv1.TurnEvent{})
		em.emit(&orchestratorv1.TurnEvent{})
		final := &orchestratorv1.TurnEvent{}
		em.hold(final)
		close(unblock)
		em.send(final)
		em.emit(&orchestratorv1.TurnEvent{}) // after the final event: kept, not sent
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if diff := cmp.Diff([]int32{1, 2, 3, 4}, sent); diff != "" {
			t.Errorf("sent (-want +got):\n%s", diff)
		}
		if n := len(em.recorded()); n != 5 {
			t.Errorf("%d events kept, want 5", n)
		}
	})
}

// TestEmitterCoalescesWaitingDeltas: a text delta joins the previous delta of its step while
// that one waits to go out (behind a blocked send, or held back before the RUNNING record);
// the client gets every seq in order and the same text; deltas of another step, or after
// another event, or after the previous one went out, stay apart.
func TestEmitterCoalescesWaitingDeltas(t *testing.T) {
	type sent struct {
		Seq  int32
		Text string
	}
	delta := func(step int32, text string) *orchestratorv1.TurnEvent {
		return &orchestratorv1.TurnEvent{Event: &orchestratorv1.TurnEvent_Delta{Delta: &orchestratorv1.TextDelta{Text: text, Step: step}}}
	}
	other := func() *orchestratorv1.TurnEvent {
		return &orchestratorv1.TurnEvent{Event: &orchestratorv1.TurnEvent_ToolCall{ToolCall: &orchestratorv1.ToolCallStarted{}}}
	}
	synctest.Test(t, func(t *testing.T) {
		unblock := make(chan struct{})
		var mu sync.Mutex
		var got []sent
		em := &emitter{sendFn: func(ev *orchestratorv1.TurnEvent) error {
			if ev.GetSeq() == 2 {
				<-unblock
			}
			mu.Lock()
			got = append(got, sent{ev.GetSeq(), ev.GetDelta().GetText()})
			mu.Unlock()
			return nil
		}}
		// Held back: the deltas queued before the record join.
		em.holdBack(other())          // 1
		em.emit(delta(1, "held "))    // 2
		em.emit(delta(1, "together")) // joins 2
		em.release()                  // the send of 2 blocks
		synctest.Wait()
		em.emit(delta(1, "a")) // 3
		em.emit(delta(1, "b")) // joins 3
		em.emit(delta(2, "c")) // 4: another step
		em.emit(delta(2, "d")) // joins 4
		em.emit(other())       // 5
		em.emit(delta(2, "e")) // 6: after another event
		close(unblock)
		synctest.Wait()        // everything went out
		em.emit(delta(2, "f")) // 7: 6 went out already
		synctest.Wait()
		final := &orchestratorv1.TurnEvent{}
		em.hold(final) // 8
		em.send(final)
		mu.Lock()
		defer mu.Unlock()
		want := []sent{{1, ""}, {2, "held together"}, {3, "ab"}, {4, "cd"}, {5, ""}, {6, "e"}, {7, "f"}, {8, ""}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("sent (-want +got):\n%s", diff)
		}
		var texts []string
		for _, ev := range em.recorded() {
			if d := ev.GetDelta(); d != nil {
				texts = append(texts, d.GetText())
			}
		}
		if diff := cmp.Diff([]string{"held togetherab", "cd", "ef"}, texts); diff != "" { // the record joins a step's deltas anyway
			t.Errorf("recorded deltas (-want +got):\n%s", diff)
		}
	})
}

// BenchmarkEmitterJoin: one-token deltas emitted while the client reads nothing join into one
// event at a constant cost a delta, whatever the answer's length (joining by string
// concatenation copied the answer so far for every delta).
func BenchmarkEmitterJoin(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for b.Loop() {
				em := &emitter{sendFn: func(*orchestratorv1.TurnEvent) error { return nil }}
				em.holdBack(&orchestratorv1.TurnEvent{})
				for range n {
					em.emit(&orchestratorv1.TurnEvent{Event: &orchestratorv1.TurnEvent_Delta{Delta: &orchestratorv1.TextDelta{Text: "tok ", Step: 1}}})
				}
				if got := len(em.recorded()[1].GetDelta().GetText()); got != 4*n {
					b.Fatalf("joined %d bytes, want %d", got, 4*n)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/delta")
		})
	}
}

// countingSession counts a session's appends and the time each began.
type countingSession struct {
	*fakeSession
	mu      sync.Mutex
	appends []time.Time
}

func (c *countingSession) AppendMessages(ctx context.Context, req *sessionv1.AppendMessagesRequest, opts ...grpc.CallOption) (*sessionv1.AppendMessagesResponse, error) {
	c.mu.Lock()
	c.appends = append(c.appends, time.Now())
	c.mu.Unlock()
	return c.fakeSession.AppendMessages(ctx, req, opts...)
}

// TestLoopStepHeldForAnswer: a tool step whose next model call answers within Config.StepHold
// is stored with the answer in one append (the user's message, then the step and the answer: two
// appends), and the step still counts in the task state; a call that takes longer has the step
// written at StepHold, during the call (three appends, the step's at StepHold); a turn cancelled
// while the step is held stores it before its end; a negative StepHold, or a step of more than
// maxHeldStepBytes, writes the step at once; an answer too long to share the append has the step
// written alone first. The session's log is the same in every case. The second step's context
// event counts the step as the session service counts it when it found the step held, and takes
// the stored counts when the write came first.
//
// The fake session counts 10 tokens a message.
func TestLoopStepHeldForAnswer(t *testing.T) {
	full := []sessionv1.MessageKind{sessionv1.MessageKind_MESSAGE_KIND_TEXT, sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL,
		sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT, sessionv1.MessageKind_MESSAGE_KIND_TEXT}
	cases := []struct {
		name        string
		hold        time.Duration
		delay       time.Duration
		cancel      bool
		long        bool // an answer of maxCombinedBytes
		bigStep     bool // a tool result of maxHeldStepBytes
		wantAppends int
		wantHeld    bool // the context event found the step held
		// wantStepAt is when the step's append began, from the second model call's start.
		wantStepAt time.Duration
		wantLog    []sessionv1.MessageKind
	}{
		{name: "quick answer", wantAppends: 2, wantHeld: true, wantLog: full},
		{name: "slow answer", delay: 3 * defaultStepHold, wantAppends: 3, wantStepAt: defaultStepHold, wantLog: full},
		{name: "longer hold", hold: 4 * defaultStepHold, delay: 3 * defaultStepHold, wantAppends: 2, wantHeld: true, wantLog: full},
		{name: "written at once", hold: -1, delay: defaultStepHold / 2, wantAppends: 3, wantLog: full},
		{name: "big step", bigStep: true, delay: defaultStepHold / 2, wantAppends: 3, wantLog: full},
		{name: "long answer", long: true, wantAppends: 3, wantHeld: true, wantLog: full},
		// A cancelled turn stores no closing message.
		{name: "cancelled while held", delay: defaultStepHold / 2, cancel: true, wantAppends: 2, wantHeld: true, wantLog: full[:3]},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cs := &countingSession{fakeSession: newFakeSession()}
				client, cancelTurn := context.WithCancel(context.Background())
				defer cancelTurn()
				var secondAt time.Time
				l := newLoopOn(t, Config{StepHold: c.hold}, cs, func(ctx context.Context, req model.Request) (*model.Response, error) {
					if last := req.Messages[len(req.Messages)-1]; last.Role == model.RoleTool && c.delay > 0 {
						secondAt = time.Now()
						if c.cancel {
							time.Sleep(c.delay)
							cancelTurn()
							<-ctx.Done()
							return nil, ctx.Err()
						}
						time.Sleep(c.delay)
					}
					if last := req.Messages[len(req.Messages)-1]; last.Role == model.RoleTool && c.long {
						return &model.Response{Content: strings.Repeat("长", maxCombinedBytes/3+1)}, nil
					}
					return toolThenAnswer(ctx, req)
				})
				if c.bigStep {
					l.tools.exec = func(context.Context, *toolsv1.ExecuteToolRequest) (*toolsv1.ToolResult, error) {
						return &toolsv1.ToolResult{Success: true, Output: fmt.Sprintf(`{"result":%q}`, strings.Repeat("x", maxHeldStepBytes))}, nil
					}
				}
				st := &fakeStream{ctx: client}
				if err := l.svc.RunTurn(&orchestratorv1.RunTurnRequest{SessionId: "s1", UserId: "u", Text: "what is 6*7?",
					Options: &orchestratorv1.TurnOptions{SkipMemory: true}}, st); err != nil {
					t.Fatalf("RunTurn: %v", err)
				}
				cs.mu.Lock()
				appends := cs.appends
				cs.mu.Unlock()
				if len(appends) != c.wantAppends {
					t.Errorf("%d appends, want %d", len(appends), c.wantAppends)
				}
				if len(appends) == 3 && c.delay > 0 {
					if got := appends[1].Sub(secondAt); got != c.wantStepAt {
						t.Errorf("the step's append began %v into the model call, want %v", got, c.wantStepAt)
					}
				}
				var kinds []sessionv1.MessageKind
				for _, m := range cs.messages("s1") {
					kinds = append(kinds, m.GetKind())
				}
				if diff := cmp.Diff(c.wantLog, kinds); diff != "" {
					t.Errorf("session log (-want +got):\n%s", diff)
				}
				// The user's message (10), and the call and the result, 10 each as stored or as the
				// session service counts them when held.
				want := int32(30)
				if c.wantHeld {
					want = 10
					for _, m := range cs.messages("s1")[1:3] {
						want += int32(l.svc.deps.Tokenizer.CountStored(m.GetToolName(), m.GetContent()))
					}
				}
				var got []int32
				for _, ev := range st.events {
					if cx := ev.GetContext(); cx.GetStep() == 2 {
						got = append(got, cx.GetTokens().GetCurrentMessage())
					}
				}
				if diff := cmp.Diff([]int32{want}, got); diff != "" {
					t.Errorf("step 2's context events count tokens of the current turn (-want +got):\n%s", diff)
				}
				rec, err := l.store.GetTurn(context.Background(), st.events[0].GetStarted().GetTurnId())
				if err != nil {
					t.Fatal(err)
				}
				task, err := l.store.TaskState(context.Background(), "s1")
				if err != nil {
					t.Fatal(err)
				}
				if n := len(task.Done); n != 1 || task.Done[0].Tool != "calc" {
					t.Errorf("task state steps %+v, want the one calc step (record status %v)", task.Done, rec.GetStatus())
				}
			})
		})
	}
}
