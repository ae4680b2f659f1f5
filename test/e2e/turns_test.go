package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/app"
	"github.com/hermes-agent/hermes/app/demo"
	"github.com/hermes-agent/hermes/internal/events"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/testenv"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	"github.com/hermes-agent/hermes/test/hermestest"
)

// startTurn starts a turn in the background; turnID receives the turn's id from TurnStarted and
// result its outcome once the stream ended.
func startTurn(ctx context.Context, orch orchestratorv1.OrchestratorServiceClient, session, user, text string) (<-chan string, <-chan *demo.TurnResult) {
	ids := make(chan string, 1)
	res := make(chan *demo.TurnResult, 1)
	go func() {
		r := &demo.TurnResult{}
		stream, err := orch.RunTurn(ctx, &orchestratorv1.RunTurnRequest{SessionId: session, UserId: user, Text: text})
		if err == nil {
			for {
				msg, err := stream.Recv()
				if err != nil {
					break
				}
				ev := msg.GetEvent()
				r.Events = append(r.Events, ev)
				switch e := ev.GetEvent().(type) {
				case *orchestratorv1.TurnEvent_Started:
					ids <- e.Started.GetTurnId()
				case *orchestratorv1.TurnEvent_Completed:
					r.Completed = e.Completed
				case *orchestratorv1.TurnEvent_Failed:
					r.Failed = e.Failed
				}
			}
		}
		res <- r
	}()
	return ids, res
}

// TestCancelTurnFromAnotherReplica: a turn waiting on a slow tool is cancelled through a second
// orchestrator replica (same Redis): it ends CANCELLED at once, its record says who cancelled
// it, the session keeps the tool call paired with a result, and ListTurns lists it.
func TestCancelTurnFromAnotherReplica(t *testing.T) {
	var toolStarted atomic.Bool
	h := func(req scripted.Request) scripted.Reply {
		if len(req.ToolResults()) > 0 || req.LastUser() == "again" {
			return scripted.Text("done")
		}
		return scripted.Calls(scripted.Call("sleepy", `{"ms":60000}`))
	}
	var second *app.App
	s := startStack(t, h, stackOptions{})
	s.registerHTTPTool("sleepy", sleepSchema, false, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		toolStarted.Store(true)
		select {
		case <-r.Context().Done():
		case <-time.After(60 * time.Second):
		}
		_, _ = io.WriteString(w, `{"slept":true}`)
	})
	// The second replica: only the orchestrator, on the same Redis, calling the first app's
	// services.
	cfg := hermestest.Config(t)
	cfg.Target = app.TargetOrchestrator
	cfg.ModelBaseURL = s.model.URL()
	cfg.RedisURL, cfg.RedisPrefix = testenv.RedisURL(), s.prefix
	cfg.NATSURL, cfg.NATSNamespace = hermestest.NATSURL, strings.TrimSuffix(s.names.TurnFinishedPrefix, ".hermes.turn.finished.")
	cfg.SessionAddr, cfg.ToolsAddr, cfg.MemoryAddr = s.main.Addr(), s.main.Addr(), s.memory.Addr()
	second = hermestest.StartApp(t, cfg, nil).App
	conn, err := rpc.Dial(second.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	other := orchestratorv1.NewOrchestratorServiceClient(conn)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sid := s.newSession("u1")
	ids, results := startTurn(ctx, s.orch, sid, "u1", "sleep a minute")
	turnID := <-ids
	testenv.WaitFor(t, 20*time.Second, "the tool to start", toolStarted.Load)

	// Another user may neither cancel nor list it.
	if _, err := other.CancelTurn(ctx, &orchestratorv1.CancelTurnRequest{TurnId: turnID, UserId: "intruder"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("CancelTurn by another user: %v, want PERMISSION_DENIED", err)
	}
	if _, err := other.ListTurns(ctx, &orchestratorv1.ListTurnsRequest{SessionId: sid, UserId: "intruder"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("ListTurns by another user: %v, want PERMISSION_DENIED", err)
	}
	begin := time.Now()
	resp, err := other.CancelTurn(ctx, &orchestratorv1.CancelTurnRequest{TurnId: turnID, UserId: "u1", Reason: "Ctrl-C"})
	if err != nil {
		t.Fatal(err)
	}
	res := <-results
	t.Logf("cancelled through the other replica in %s", time.Since(begin).Round(time.Millisecond))
	rec := resp.GetTurn()
	if rec.GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_CANCELLED || rec.GetCancelledBy() != "user:u1" || len(rec.GetEvents()) != 0 {
		t.Errorf("record after CancelTurn: status %v, cancelled_by %q, %d events", rec.GetStatus(), rec.GetCancelledBy(), len(rec.GetEvents()))
	}
	if res.Failed == nil || res.Failed.GetCode() != "CANCELLED" || !strings.Contains(res.Failed.GetMessage(), "Ctrl-C") {
		t.Errorf("final event %v, want TurnFailed CANCELLED with the reason", res.Failed)
	}
	// The call is stored with a result.
	var calls, results2 int
	for _, m := range s.messages(sid, "u1") {
		switch m.GetKind() {
		case sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL:
			calls++
		case sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT:
			results2++
		}
	}
	if calls != 1 || results2 != 1 {
		t.Errorf("session holds %d calls and %d results, want 1 and 1", calls, results2)
	}
	// Cancelling a finished turn returns its record unchanged.
	again, err := s.orch.CancelTurn(ctx, &orchestratorv1.CancelTurnRequest{TurnId: turnID, UserId: "u1"})
	if err != nil || again.GetTurn().GetCancelledBy() != "user:u1" {
		t.Errorf("second CancelTurn: %v, %v", again.GetTurn(), err)
	}
	list, err := other.ListTurns(ctx, &orchestratorv1.ListTurnsRequest{SessionId: sid, UserId: "u1"})
	if err != nil || len(list.GetTurns()) != 1 || list.GetTurns()[0].GetId() != turnID || list.GetTurns()[0].GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_CANCELLED {
		t.Errorf("ListTurns after the cancel: %v, %v", list.GetTurns(), err)
	}
	// The session takes the next turn.
	if r := s.run(ctx, sid, "u1", "again", nil); r.Failed != nil && r.Failed.GetCode() == "CANCELLED" {
		t.Errorf("the next turn was cancelled too: %v", r.Failed)
	}
}

// TestListTurnsPages: a session's turns, newest first, in pages, without their events.
func TestListTurnsPages(t *testing.T) {
	h := func(req scripted.Request) scripted.Reply { return scripted.Text("ok: " + req.LastUser()) }
	s := startStack(t, h, stackOptions{embedded: true})
	ctx := context.Background()
	sid := s.newSession("u1")
	var want []string
	for i := range 5 {
		r := s.run(ctx, sid, "u1", fmt.Sprint("turn ", i), nil)
		if r.Completed == nil {
			t.Fatalf("turn %d: %v", i, r.Failed)
		}
		want = append([]string{r.Completed.GetTurnId()}, want...)
	}
	var got []string
	token := ""
	for range 5 {
		resp, err := s.orch.ListTurns(ctx, &orchestratorv1.ListTurnsRequest{SessionId: sid, UserId: "u1", PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range resp.GetTurns() {
			if len(tr.GetEvents()) != 0 || tr.GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_COMPLETED {
				t.Errorf("listed turn %s: %d events, status %v", tr.GetId(), len(tr.GetEvents()), tr.GetStatus())
			}
			got = append(got, tr.GetId())
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ListTurns newest first (-want +got):\n%s", diff)
	}
	for _, bad := range []*orchestratorv1.ListTurnsRequest{
		{SessionId: sid, UserId: "u1", PageSize: 101},
		{SessionId: sid, UserId: "u1", PageToken: "bogus"},
		{UserId: "u1"},
	} {
		if _, err := s.orch.ListTurns(ctx, bad); status.Code(err) != codes.InvalidArgument {
			t.Errorf("ListTurns(%v) = %v, want INVALID_ARGUMENT", bad, err)
		}
	}
	if _, err := s.orch.ListTurns(ctx, &orchestratorv1.ListTurnsRequest{SessionId: "missing", UserId: "u1"}); status.Code(err) != codes.NotFound {
		t.Errorf("ListTurns of a missing session: %v, want NOT_FOUND", err)
	}
}

// TestReusedToolCallIDs: a provider that names every call "call_0" (in every step of every
// turn) still has every turn's tool use in its context, well-formed, with no call dropped as a
// duplicate or a result as an orphan.
func TestReusedToolCallIDs(t *testing.T) {
	h := func(req scripted.Request) scripted.Reply {
		// Two tool steps per turn, then the answer.
		since := 0
		for i, m := range req.Messages {
			if m.Role == "user" {
				since = i
			}
		}
		steps := 0
		for _, m := range req.Messages[since:] {
			if m.Role == "tool" {
				steps++
			}
		}
		if steps >= 2 {
			return scripted.Text("done")
		}
		c := scripted.Call("current_time", `{}`)
		c.ID = "call_0"
		return scripted.Reply{ToolCalls: []scripted.ToolCall{c}}
	}
	s := startStack(t, h, stackOptions{embedded: true})
	ctx := context.Background()
	sid := s.newSession("u1")
	for i := range 3 {
		if r := s.run(ctx, sid, "u1", fmt.Sprint("what time is it, ", i), &orchestratorv1.TurnOptions{SkipMemory: true}); r.Completed == nil {
			t.Fatalf("turn %d: %v", i, r.Failed)
		}
	}
	reqs := s.model.Requests()
	// The extractor of the last turn may have asked after it.
	last := lastTurnRequest(reqs)
	if err := checkWellFormed(last); err != nil {
		t.Errorf("the last request is malformed: %v", err)
	}
	calls, results := 0, 0
	for _, m := range last.Messages {
		calls += len(m.ToolCalls)
		if m.Role == "tool" {
			results++
		}
	}
	// Three turns of two steps each, all in the window.
	if calls != 6 || results != 6 {
		t.Errorf("the last request carries %d calls and %d results, want 6 and 6", calls, results)
	}
	for _, r := range reqs {
		if err := checkWellFormed(r); err != nil {
			t.Errorf("request %d is malformed: %v", r.N, err)
		}
	}
	built, err := s.sessions.BuildContext(ctx, &sessionv1.BuildContextRequest{SessionId: sid, UserId: "u1"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(built.GetRepairs()); n != 0 {
		t.Errorf("BuildContext repaired %d pairs: %v", n, built.GetRepairs())
	}
}

// TestLargeSessionKeepsWorking: five appends of 4 × 0.9 MB, each within the limits, make an
// 18 MB session, beyond gRPC's 16 MiB message limit; with a window and budget that include
// every message, turns, BuildContext and ListMessages keep answering, with each message's text
// cut in the context and the pages cut by size. (Counting the tokens of 18 MB takes most of the
// test's time.)
func TestLargeSessionKeepsWorking(t *testing.T) {
	if testing.Short() {
		t.Skip("appends 18 MB")
	}
	h := func(req scripted.Request) scripted.Reply { return scripted.Text("still here") }
	s := startStack(t, h, stackOptions{embedded: true})
	ctx := context.Background()
	cs, err := s.sessions.CreateSession(ctx, &sessionv1.CreateSessionRequest{UserId: "u1", Config: &sessionv1.SessionConfig{WindowTurns: 200, TokenBudget: 10_000_000}})
	if err != nil {
		t.Fatal(err)
	}
	sid := cs.GetSession().GetId()
	big := strings.Repeat("数据 order line 42, ", 900_000/21) // about 0.9 MB
	for i := range 5 {
		var batch []*sessionv1.NewMessage
		for j := range 4 {
			role := sessionv1.Role_ROLE_ASSISTANT
			if j == 0 {
				role = sessionv1.Role_ROLE_USER
			}
			batch = append(batch, &sessionv1.NewMessage{Role: role, Content: fmt.Sprint(i, j, big)})
		}
		if _, err := s.sessions.AppendMessages(ctx, &sessionv1.AppendMessagesRequest{SessionId: sid, UserId: "u1", Messages: batch}); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	if _, err := s.sessions.BuildContext(ctx, &sessionv1.BuildContextRequest{SessionId: sid, UserId: "u1"}); err != nil {
		t.Fatalf("BuildContext: %v", err)
	}
	r := s.run(ctx, sid, "u1", "are you still there?", &orchestratorv1.TurnOptions{SkipMemory: true})
	if r.Completed == nil {
		t.Fatalf("turn on an 18 MB session: %v", r.Failed)
	}
	var longest int
	cut := false
	for _, m := range lastTurnRequest(s.model.Requests()).Messages {
		longest = max(longest, len(m.Content))
		cut = cut || strings.Contains(m.Content, "bytes cut here")
	}
	if longest > 64<<10 || !cut {
		t.Errorf("the model's request has a message of %d bytes (cut noted: %v), want at most 64 KiB with a note", longest, cut)
	}
	msgs := s.messages(sid, "u1")
	if len(msgs) != 22 {
		t.Errorf("ListMessages paged through %d messages, want 22", len(msgs))
	}
}

// TestCancelledStreamUsage: a turn cancelled while the model streamed reports the call and
// the tokens streamed until then.
func TestCancelledStreamUsage(t *testing.T) {
	h := func(req scripted.Request) scripted.Reply {
		return scripted.Reply{Text: strings.Repeat("a long answer that streams slowly ", 200), ChunkDelay: 20 * time.Millisecond, OmitUsage: true}
	}
	s := startStack(t, h, stackOptions{embedded: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sid := s.newSession("u1")
	stream, err := s.orch.RunTurn(ctx, &orchestratorv1.RunTurnRequest{SessionId: sid, UserId: "u1", Text: "talk", Options: &orchestratorv1.TurnOptions{SkipMemory: true}})
	if err != nil {
		t.Fatal(err)
	}
	var turnID string
	deltas := 0
	for deltas < 5 {
		msg, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if st := msg.GetEvent().GetStarted(); st != nil {
			turnID = st.GetTurnId()
		}
		if msg.GetEvent().GetDelta() != nil {
			deltas++
		}
	}
	resp, err := s.orch.CancelTurn(context.Background(), &orchestratorv1.CancelTurnRequest{TurnId: turnID, UserId: "u1"})
	if err != nil {
		t.Fatal(err)
	}
	u := resp.GetTurn().GetUsage()
	if u.GetModelCalls() != 1 || u.GetCompletionTokens() == 0 || u.GetPromptTokens() == 0 || u.GetSource() != "tokenizer" {
		t.Errorf("usage of the cancelled turn: %v; want 1 call with prompt and streamed completion tokens", u)
	}
}

// TestOutboxSurvivesNATSOutage: turns that finish while NATS is down, in a process that is
// then stopped before NATS returns, have their turn.finished published exactly once when both
// are back.
func TestOutboxSurvivesNATSOutage(t *testing.T) {
	natsDir, dataDir := t.TempDir(), t.TempDir()
	nats1, err := events.StartEmbedded(natsDir)
	if err != nil {
		t.Fatal(err)
	}
	model, err := scripted.New(hermestest.NoMemories(func(scripted.Request) scripted.Reply { return scripted.Text("ok") }))
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	cfg := hermestest.Config(t)
	cfg.DataDir = dataDir
	cfg.ModelBaseURL = model.URL()
	cfg.NATSURL = nats1.URL()
	cfg.ShutdownTimeout = time.Second
	cfg.Orchestrator.PublishTimeout = 500 * time.Millisecond
	cfg.Memory.ConsumerEnabled = false
	log := hermestest.Logger(t)
	a := hermestest.StartApp(t, cfg, log)
	conn, err := rpc.Dial(a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	orch := orchestratorv1.NewOrchestratorServiceClient(conn)
	sessions := sessionv1.NewSessionServiceClient(conn)
	ctx := context.Background()
	cs, err := sessions.CreateSession(ctx, &sessionv1.CreateSessionRequest{UserId: "u1"})
	if err != nil {
		t.Fatal(err)
	}
	nats1.Close() // NATS goes down
	var turns []string
	for i := range 3 {
		r, err := demo.RunTurn(ctx, orch, &orchestratorv1.RunTurnRequest{SessionId: cs.GetSession().GetId(), UserId: "u1", Text: fmt.Sprint("hello ", i), Options: &orchestratorv1.TurnOptions{SkipMemory: true}}, nil)
		if err != nil || r.Completed == nil {
			t.Fatalf("turn %d during the outage: %v %v", i, err, r.Failed)
		}
		turns = append(turns, r.Completed.GetTurnId())
	}
	_ = conn.Close()
	_ = a.Stop() // the orchestrator goes down while NATS is

	nats2, err := events.StartEmbedded(natsDir) // NATS returns (on a new port), then Hermes
	if err != nil {
		t.Fatal(err)
	}
	defer nats2.Close()
	cfg.NATSURL = nats2.URL()
	b := hermestest.StartApp(t, cfg, log)
	defer func() { _ = b.Stop() }() // before NATS stops

	nc, js, err := events.Connect(nats2.URL(), "test", log)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	names := events.DefaultNames()
	// count reads the whole stream: how often each turn's turn.finished is in it.
	count := func() map[string]int {
		got := map[string]int{}
		st, err := js.Stream(ctx, names.Stream)
		if err != nil {
			return got
		}
		info, err := st.Info(ctx)
		if err != nil {
			return got
		}
		for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if err != nil {
				continue
			}
			if ev, err := events.UnmarshalTurnFinished(m.Data); err == nil {
				got[ev.GetTurnId()]++
			}
		}
		return got
	}
	want := map[string]int{}
	for _, id := range turns {
		want[id] = 1
	}
	testenv.WaitFor(t, 30*time.Second, "every turn.finished of the outage to be published", func() bool {
		return len(count()) == len(turns)
	})
	if diff := cmp.Diff(want, count()); diff != "" {
		t.Errorf("turn.finished events per turn (-want +got):\n%s", diff)
	}
}
