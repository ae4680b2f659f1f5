package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/app"
	"github.com/hermes-agent/hermes/app/demo"
	"github.com/hermes-agent/hermes/internal/events"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	"github.com/hermes-agent/hermes/internal/testenv"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

const sleepSchema = `{"type":"object","properties":{"ms":{"type":"integer","minimum":0}},"required":["ms"]}`

// TestModelDown: with the endpoint gone, the turn ends with a clear UNAVAILABLE event, the user
// message stays stored and nothing half-written follows it.
func TestModelDown(t *testing.T) {
	s := startStack(t, scripted.Sequence(), stackOptions{configure: func(c *app.Config) { c.Orchestrator.ModelRetries = 1 }})
	s.model.Close()
	sid := s.newSession("u1")
	res := s.run(context.Background(), sid, "u1", "hello?", nil)
	if res.Failed == nil || res.Failed.GetCode() != "UNAVAILABLE" {
		t.Fatalf("final event %v / %v, want TurnFailed UNAVAILABLE", res.Completed, res.Failed)
	}
	if !strings.Contains(res.Failed.GetMessage(), s.model.URL()) {
		t.Errorf("message %q does not name the endpoint", res.Failed.GetMessage())
	}
	msgs := s.messages(sid, "u1")
	if len(msgs) != 1 || msgs[0].GetContent() != "hello?" {
		t.Errorf("session log %v, want only the user message", msgs)
	}
	turn, err := s.orch.GetTurn(context.Background(), &orchestratorv1.GetTurnRequest{TurnId: res.Failed.GetTurnId(), UserId: "u1"})
	if err != nil || turn.GetTurn().GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_FAILED {
		t.Errorf("GetTurn = %v, %v; want a FAILED record", turn, err)
	}
}

// TestNoModel: without a configured model RunTurn is FAILED_PRECONDITION and stores nothing.
func TestNoModel(t *testing.T) {
	s := startStack(t, nil, stackOptions{noModel: true})
	sid := s.newSession("u1")
	stream, err := s.orch.RunTurn(context.Background(), &orchestratorv1.RunTurnRequest{SessionId: sid, UserId: "u1", Text: "hi"})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "HERMES_MODEL_BASE_URL") {
		t.Fatalf("err = %v, want FAILED_PRECONDITION naming HERMES_MODEL_BASE_URL", err)
	}
	if msgs := s.messages(sid, "u1"); len(msgs) != 0 {
		t.Errorf("%d messages stored, want none", len(msgs))
	}
}

func TestInvalidRequests(t *testing.T) {
	s := startStack(t, nil, stackOptions{})
	sid := s.newSession("u1")
	tests := []struct {
		name string
		req  *orchestratorv1.RunTurnRequest
		code codes.Code
	}{
		{"no session", &orchestratorv1.RunTurnRequest{UserId: "u1", Text: "x"}, codes.InvalidArgument},
		{"no user", &orchestratorv1.RunTurnRequest{SessionId: sid, Text: "x"}, codes.InvalidArgument},
		{"no text", &orchestratorv1.RunTurnRequest{SessionId: sid, UserId: "u1"}, codes.InvalidArgument},
		{"too many steps", &orchestratorv1.RunTurnRequest{SessionId: sid, UserId: "u1", Text: "x", Options: &orchestratorv1.TurnOptions{MaxSteps: 500}}, codes.InvalidArgument},
		{"text too long", &orchestratorv1.RunTurnRequest{SessionId: sid, UserId: "u1", Text: strings.Repeat("x", 40<<10)}, codes.ResourceExhausted},
		{"unknown session", &orchestratorv1.RunTurnRequest{SessionId: "01NOPE", UserId: "u1", Text: "x"}, codes.NotFound},
		{"another user's session", &orchestratorv1.RunTurnRequest{SessionId: sid, UserId: "mallory", Text: "x"}, codes.PermissionDenied},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stream, err := s.orch.RunTurn(context.Background(), tc.req)
			if err == nil {
				_, err = stream.Recv()
			}
			if status.Code(err) != tc.code {
				t.Errorf("err = %v, want %s", err, tc.code)
			}
		})
	}
	if _, err := s.orch.GetTurn(context.Background(), &orchestratorv1.GetTurnRequest{TurnId: "missing", UserId: "u1"}); status.Code(err) != codes.NotFound {
		t.Errorf("GetTurn(missing) = %v, want NOT_FOUND", err)
	}
	if msgs := s.messages(sid, "u1"); len(msgs) != 0 {
		t.Errorf("rejected requests stored %d messages", len(msgs))
	}
}

// TestCancelledTurn: a client that goes away cancels the turn and its tool calls; what the turn
// did is stored consistently — the call with a "cancelled" result, never a call alone.
func TestCancelledTurn(t *testing.T) {
	started := make(chan struct{}, 4)
	var mu sync.Mutex
	var toolCtxDone bool
	var trace []string
	defer func() {
		if t.Failed() {
			mu.Lock()
			t.Logf("tool endpoint trace: %v", trace)
			mu.Unlock()
		}
	}()
	h := func(req scripted.Request) scripted.Reply {
		if len(req.ToolResults()) > 0 {
			return scripted.Text("done")
		}
		if strings.Contains(req.LastUser(), "slow model") {
			return scripted.Reply{Text: "late", Delay: 30 * time.Second}
		}
		return scripted.Calls(scripted.Call("sleepy", `{"ms":30000}`))
	}
	s := startStack(t, h, stackOptions{})
	s.registerHTTPTool("sleepy", sleepSchema, false, func(w http.ResponseWriter, r *http.Request) {
		// The server notices a client that went away only once the body was read.
		_, _ = io.ReadAll(r.Body)
		mu.Lock()
		trace = append(trace, "start "+time.Now().Format("05.000")+" attempt "+r.Header.Get("X-Hermes-Attempt")+" call "+r.Header.Get("X-Hermes-Call-Id"))
		mu.Unlock()
		defer func() { mu.Lock(); trace = append(trace, "end "+time.Now().Format("05.000")); mu.Unlock() }()
		started <- struct{}{}
		select {
		case <-r.Context().Done():
			mu.Lock()
			toolCtxDone = true
			mu.Unlock()
		case <-time.After(30 * time.Second):
		}
	})

	t.Run("during a tool call", func(t *testing.T) {
		sid := s.newSession("u1")
		ctx, cancel := context.WithCancel(context.Background())
		stream, err := s.orch.RunTurn(ctx, &orchestratorv1.RunTurnRequest{SessionId: sid, UserId: "u1", Text: "run the slow tool"})
		if err != nil {
			t.Fatal(err)
		}
		// The turn's id comes with TurnStarted, sent before the tool runs; it is read before the
		// client goes away, since a cancelled stream drops what it had not yet delivered (on a
		// busy machine the reader may lag behind the tool's start).
		ids := make(chan string, 1)
		go func() {
			for {
				m, err := stream.Recv()
				if err != nil {
					return
				}
				if st := m.GetEvent().GetStarted(); st != nil {
					ids <- st.GetTurnId()
				}
			}
		}()
		<-started
		var turnID string
		select {
		case turnID = <-ids:
		case <-time.After(10 * time.Second):
			t.Fatal("no TurnStarted within 10s of the tool's start")
		}
		cancel()
		var kinds []string
		testenv.WaitFor(t, 10*time.Second, "the cancelled step to be stored", func() bool {
			kinds = kinds[:0]
			for _, m := range s.messages(sid, "u1") {
				kinds = append(kinds, m.GetKind().String())
			}
			return len(kinds) == 3
		})
		msgs := s.messages(sid, "u1")
		if msgs[1].GetKind() != sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL || msgs[2].GetKind() != sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT ||
			msgs[1].GetToolCallId() != msgs[2].GetToolCallId() || !strings.Contains(msgs[2].GetContent(), "cancelled") {
			t.Fatalf("stored %v, want user, tool_call, tool_result(cancelled) as a pair", msgs)
		}
		testenv.WaitFor(t, 10*time.Second, "the tool's request to be cancelled", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return toolCtxDone
		})
		var lastSeen string
		defer func() {
			if t.Failed() {
				t.Logf("turn %s, last GetTurn: %s", turnID, lastSeen)
			}
		}()
		testenv.WaitFor(t, 10*time.Second, "a CANCELLED turn record", func() bool {
			got, err := s.orch.GetTurn(context.Background(), &orchestratorv1.GetTurnRequest{TurnId: turnID, UserId: "u1"})
			lastSeen = fmt.Sprintf("%v, %v", got.GetTurn().GetStatus(), err)
			return err == nil && got.GetTurn().GetStatus() == orchestratorv1.TurnStatus_TURN_STATUS_CANCELLED
		})
		// The next turn sees a well-formed history and the unfinished request as pending.
		res := s.run(context.Background(), sid, "u1", "slow model please", &orchestratorv1.TurnOptions{Timeout: durationpbOf(300 * time.Millisecond)})
		if res.Failed == nil || res.Failed.GetCode() != "DEADLINE_EXCEEDED" {
			t.Fatalf("final event %v/%v, want DEADLINE_EXCEEDED", res.Completed, res.Failed)
		}
		// The turn's own request: the extractor of the cancelled turn may have asked after it.
		last := lastTurnRequest(s.model.Requests())
		if err := checkWellFormed(last); err != nil {
			t.Error(err)
		}
		if !strings.Contains(systemText(last), "unfinished request: run the slow tool") {
			t.Errorf("the task state does not list the cancelled request as pending:\n%s", systemText(last))
		}
	})
}

// TestRepeatedFailures: a model that keeps calling a tool that does not exist gets the tool
// service's result each time and the turn ends after three with a clear message.
func TestRepeatedFailures(t *testing.T) {
	s := startStack(t, func(req scripted.Request) scripted.Reply {
		return scripted.Calls(scripted.Call("no_such_tool", `{}`))
	}, stackOptions{})
	sid := s.newSession("u1")
	res := s.run(context.Background(), sid, "u1", "do it", nil)
	if res.Failed == nil || res.Failed.GetCode() != "ABORTED" || !strings.Contains(res.Failed.GetMessage(), "no_such_tool failed 3 times in a row (unknown_tool)") {
		t.Fatalf("final event %v/%v, want ABORTED after 3 unknown-tool failures", res.Completed, res.Failed)
	}
	if len(res.Results) != 3 || res.Results[0].GetErrorCode() != "unknown_tool" {
		t.Errorf("results %v, want 3 unknown_tool", res.Results)
	}
	msgs := s.messages(sid, "u1")
	if last := msgs[len(msgs)-1]; last.GetRole() != sessionv1.Role_ROLE_ASSISTANT || !strings.Contains(last.GetContent(), "could not finish") {
		t.Errorf("last message %v, want the closing explanation", last)
	}
	// The step limit ends a model that keeps calling a working tool.
	s2 := startStack(t, func(req scripted.Request) scripted.Reply {
		return scripted.Calls(scripted.Call("current_time", `{}`))
	}, stackOptions{})
	res = s2.run(context.Background(), s2.newSession("u1"), "u1", "loop", &orchestratorv1.TurnOptions{MaxSteps: 4})
	if res.Failed == nil || res.Failed.GetCode() != "RESOURCE_EXHAUSTED" || len(res.Results) != 4 {
		t.Fatalf("final %v/%v after %d results, want RESOURCE_EXHAUSTED after 4 steps", res.Completed, res.Failed, len(res.Results))
	}
}

// TestParallelToolCalls: the calls of one step run at the same time — each endpoint waits for
// the other to arrive, which only works when both are in flight together.
func TestParallelToolCalls(t *testing.T) {
	h := func(req scripted.Request) scripted.Reply {
		if len(req.ToolResults()) > 0 {
			return scripted.Text("both done")
		}
		return scripted.Calls(scripted.Call("left", `{"ms":1}`), scripted.Call("right", `{"ms":2}`))
	}
	s := startStack(t, h, stackOptions{})
	var wg sync.WaitGroup
	wg.Add(2)
	barrier := func(w http.ResponseWriter, r *http.Request) {
		wg.Done()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
			_, _ = w.Write([]byte(`{"met":true}`))
		case <-time.After(5 * time.Second):
			http.Error(w, "the other call never arrived: calls ran one after the other", http.StatusBadRequest)
		}
	}
	s.registerHTTPTool("left", sleepSchema, false, barrier)
	s.registerHTTPTool("right", sleepSchema, false, barrier)
	res := s.run(context.Background(), s.newSession("u1"), "u1", "both", nil)
	if res.Completed == nil || len(res.Results) != 2 {
		t.Fatalf("turn %v/%v with results %v", res.Completed, res.Failed, res.Results)
	}
	for _, r := range res.Results {
		if !r.GetSuccess() {
			t.Errorf("%s: %s", r.GetName(), r.GetError())
		}
	}
}

// TestAPIKeys: with --auth-file the user comes from the key; another user's session or turn is
// PERMISSION_DENIED.
func TestAPIKeys(t *testing.T) {
	file := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(file, []byte("sk-alice-0123456789abcdef: alice\nsk-bob-0123456789abcdefgh: bob\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startStack(t, func(scripted.Request) scripted.Reply { return scripted.Text("hi") }, stackOptions{configure: func(c *app.Config) { c.AuthFile = file }})
	with := func(key string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)
	}
	if _, err := s.sessions.CreateSession(context.Background(), &sessionv1.CreateSessionRequest{UserId: "alice"}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("CreateSession without a key: %v, want UNAUTHENTICATED", err)
	}
	session := func(key string) string {
		resp, err := s.sessions.CreateSession(with(key), &sessionv1.CreateSessionRequest{Title: "e2e"})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetSession().GetId()
	}
	alice := session("sk-alice-0123456789abcdef")
	bob := session("sk-bob-0123456789abcdefgh")
	call := func(ctx context.Context, req *orchestratorv1.RunTurnRequest) (*orchestratorv1.TurnEvent, error) {
		stream, err := s.orch.RunTurn(ctx, req)
		if err != nil {
			return nil, err
		}
		var last *orchestratorv1.TurnEvent
		for {
			m, err := stream.Recv()
			if err != nil {
				if last != nil {
					return last, nil
				}
				return nil, err
			}
			last = m.GetEvent()
		}
	}
	tests := []struct {
		name string
		ctx  context.Context
		req  *orchestratorv1.RunTurnRequest
		code codes.Code
	}{
		{"no key", context.Background(), &orchestratorv1.RunTurnRequest{SessionId: alice, Text: "x"}, codes.Unauthenticated},
		{"unknown key", with("sk-nobody-0123456789abcdef"), &orchestratorv1.RunTurnRequest{SessionId: alice, Text: "x"}, codes.Unauthenticated},
		{"naming another user", with("sk-alice-0123456789abcdef"), &orchestratorv1.RunTurnRequest{SessionId: alice, UserId: "bob", Text: "x"}, codes.PermissionDenied},
		{"another user's session", with("sk-alice-0123456789abcdef"), &orchestratorv1.RunTurnRequest{SessionId: bob, Text: "x"}, codes.PermissionDenied},
		{"own session, user from the key", with("sk-alice-0123456789abcdef"), &orchestratorv1.RunTurnRequest{SessionId: alice, Text: "x"}, codes.OK},
	}
	var aliceTurn string
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			last, err := call(tc.ctx, tc.req)
			if status.Code(err) != tc.code {
				t.Fatalf("err = %v, want %s", err, tc.code)
			}
			if tc.code == codes.OK {
				if last.GetCompleted() == nil {
					t.Fatalf("last event %v, want completed", last)
				}
				aliceTurn = last.GetCompleted().GetTurnId()
			}
		})
	}
	if _, err := s.orch.GetTurn(with("sk-bob-0123456789abcdefgh"), &orchestratorv1.GetTurnRequest{TurnId: aliceTurn}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("bob's GetTurn of alice's turn = %v, want PERMISSION_DENIED", err)
	}
	if got, err := s.orch.GetTurn(with("sk-alice-0123456789abcdef"), &orchestratorv1.GetTurnRequest{TurnId: aliceTurn}); err != nil || got.GetTurn().GetUserId() != "alice" {
		t.Errorf("alice's GetTurn = %v, %v", got, err)
	}
}

// TestUsageFallback: a provider that reports no usage gets the tokenizer's counts, and the turn
// says so.
func TestUsageFallback(t *testing.T) {
	s := startStack(t, func(scripted.Request) scripted.Reply { return scripted.Reply{Text: "hello there", OmitUsage: true} }, stackOptions{})
	res := s.run(context.Background(), s.newSession("u1"), "u1", "hi", nil)
	u := res.Completed.GetUsage()
	if u.GetSource() != "tokenizer" || u.GetPromptTokens() != int64(res.Contexts[0].GetTokens().GetTotal()) || u.GetCompletionTokens() == 0 {
		t.Errorf("usage %v, want tokenizer counts (prompt = the context's %d tokens)", u, res.Contexts[0].GetTokens().GetTotal())
	}
}

// TestPublishFailureKeepsTheTurn: with NATS gone the turn completes; turn.finished is retried in
// the background and reaches the stream once NATS is back.
func TestPublishFailureKeepsTheTurn(t *testing.T) {
	dir := t.TempDir()
	srv, err := events.StartEmbedded(filepath.Join(dir, "nats"))
	if err != nil {
		t.Fatal(err)
	}
	url := srv.URL()
	s := startStack(t, func(scripted.Request) scripted.Reply { return scripted.Text("fine") }, stackOptions{embedded: true, configure: func(c *app.Config) {
		c.NATSURL = url
		c.Memory.ConsumerEnabled = false
	}})
	sid := s.newSession("u1")
	srv.Close()
	res := s.run(context.Background(), sid, "u1", "are you there?", nil)
	if res.Completed == nil {
		t.Fatalf("the turn failed while NATS was down: %v", res.Failed)
	}
	// NATS comes back on the same port with the same store: the retried publish lands.
	host := strings.TrimPrefix(url, "nats://")
	_, portText, _ := strings.Cut(host, ":")
	port, _ := strconv.Atoi(portText)
	back, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: filepath.Join(dir, "nats"), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	back.Start()
	defer back.Shutdown()
	if !back.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS did not come back")
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	testenv.WaitFor(t, 30*time.Second, "turn.finished to reach the stream", func() bool {
		st, err := js.Stream(context.Background(), events.DefaultNames().Stream)
		if err != nil {
			return false
		}
		info, err := st.Info(context.Background())
		return err == nil && info.State.Msgs == 1
	})
}

// TestConcurrentTurnsOnOneSession: turns sent at once to one session run one after the other,
// so each turn's messages stay together in the log instead of interleaving.
func TestConcurrentTurnsOnOneSession(t *testing.T) {
	h := func(req scripted.Request) scripted.Reply {
		if len(req.ToolResults()) > 0 {
			return scripted.Text("done")
		}
		return scripted.Calls(scripted.Call("current_time", `{}`))
	}
	s := startStack(t, h, stackOptions{})
	session := s.newSession("u1")
	const n = 4
	errs := make(chan error, n)
	for i := range n {
		go func() {
			res, err := demo.RunTurn(context.Background(), s.orch, &orchestratorv1.RunTurnRequest{SessionId: session, UserId: "u1", Text: fmt.Sprintf("turn %d", i)}, nil)
			if err == nil && res.Completed == nil {
				err = fmt.Errorf("turn %d did not complete: %v", i, res.Failed)
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	msgs := s.messages(session, "u1")
	current := ""
	turns := 0
	for _, m := range msgs {
		id := m.GetMetadata()["turn_id"]
		if m.GetRole() == sessionv1.Role_ROLE_USER {
			current = id
			turns++
			continue
		}
		if id != current {
			t.Fatalf("message %d (%s) of turn %s sits inside turn %s: turns interleaved", m.GetSeq(), m.GetKind(), id, current)
		}
	}
	if turns != n {
		t.Errorf("%d turns in the log, want %d", turns, n)
	}
}
