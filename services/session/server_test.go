package session_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/testenv"
	"github.com/hermes-agent/hermes/internal/tokenizer"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	"github.com/hermes-agent/hermes/services/session"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// serve runs the session service over store on an in-memory gRPC connection, with a window of
// the last 12 turns and every turn folded as it leaves (fold 1).
func serve(t testing.TB, store session.Store) sessionv1.SessionServiceClient {
	t.Helper()
	return serveConfig(t, store, session.Config{WindowTurns: 12, TokenBudget: 100_000, MaxEvicted: 200, FoldTurns: 1})
}

// serveConfig is serve with the given configuration.
func serveConfig(t testing.TB, store session.Store, cfg session.Config) sessionv1.SessionServiceClient {
	t.Helper()
	tok, err := tokenizer.New("o200k_base")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(rpc.ServerOptions{Logger: quiet})
	svc, err := session.NewService(cfg, session.Options{Store: store, Tokenizer: tok, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv.Register(&sessionv1.SessionService_ServiceDesc, svc)
	conn := testenv.Serve(t, srv)
	return sessionv1.NewSessionServiceClient(conn)
}

func redisStore(t testing.TB) session.Store {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	return session.NewRedisStore(rdb, prefix)
}

// stores opens each backend for a test through gRPC.
var stores = map[string]func(t *testing.T) session.Store{
	"redis": func(t *testing.T) session.Store { return redisStore(t) },
	"bolt": func(t *testing.T) session.Store {
		s := boltStore(t, filepath.Join(t.TempDir(), "s.db"))
		t.Cleanup(func() { _ = s.Close() })
		return s
	},
}

func boltStore(t testing.TB, path string) *session.BoltStore {
	t.Helper()
	s, err := session.OpenBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var bg = context.Background()

func text(role sessionv1.Role, content string) *sessionv1.NewMessage {
	return &sessionv1.NewMessage{Role: role, Kind: sessionv1.MessageKind_MESSAGE_KIND_TEXT, Content: content}
}

func toolCall(id, name, args string) *sessionv1.NewMessage {
	return &sessionv1.NewMessage{Role: sessionv1.Role_ROLE_ASSISTANT, Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL, ToolCallId: id, ToolName: name, Content: args}
}

func toolResult(id, name, out string) *sessionv1.NewMessage {
	return &sessionv1.NewMessage{Role: sessionv1.Role_ROLE_TOOL, Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT, ToolCallId: id, ToolName: name, Content: out}
}

// appendTurns appends n turns, each a user message, a tool call with its result and an answer;
// the user messages of the turns in stickyTurns (1-based) are sticky.
func appendTurns(t testing.TB, c sessionv1.SessionServiceClient, sid, uid string, from, n int, stickyTurns ...int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		u := text(sessionv1.Role_ROLE_USER, fmt.Sprintf("turn %d: find me a restaurant", i))
		for _, s := range stickyTurns {
			if s == i {
				u.Sticky = true
				u.Content = fmt.Sprintf("turn %d: I am allergic to peanuts", i)
			}
		}
		id := fmt.Sprintf("call-%d", i)
		_, err := c.AppendMessages(bg, &sessionv1.AppendMessagesRequest{SessionId: sid, UserId: uid, Messages: []*sessionv1.NewMessage{
			u,
			toolCall(id, "search_restaurant", `{"cuisine":"sichuan"}`),
			toolResult(id, "search_restaurant", `{"results":["蜀香园"]}`),
			text(sessionv1.Role_ROLE_ASSISTANT, fmt.Sprintf("answer %d", i)),
		}})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func create(t testing.TB, c sessionv1.SessionServiceClient, uid string) string {
	t.Helper()
	res, err := c.CreateSession(bg, &sessionv1.CreateSessionRequest{UserId: uid, Title: "dinner"})
	if err != nil {
		t.Fatal(err)
	}
	return res.GetSession().GetId()
}

// checkPairs fails when a tool_call in msgs is not immediately followed (after its step's other
// calls) by its result, or a result has no call.
func checkPairs(t *testing.T, msgs []*sessionv1.Message) {
	t.Helper()
	open := map[string]bool{}
	inResults := false
	for _, m := range msgs {
		switch m.GetKind() {
		case sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL:
			if inResults && len(open) > 0 {
				t.Fatalf("new step before results of %v", open)
			}
			inResults = false
			open[m.GetToolCallId()] = true
		case sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT:
			if !open[m.GetToolCallId()] {
				t.Fatalf("orphan tool_result %s", m.GetToolCallId())
			}
			inResults = true
			delete(open, m.GetToolCallId())
		default:
			if len(open) > 0 {
				t.Fatalf("tool_calls %v not answered before seq %d", open, m.GetSeq())
			}
			inResults = false
		}
	}
	if len(open) > 0 {
		t.Fatalf("tool_calls %v not answered", open)
	}
}

// TestBuildContextThirtyTurns is the check: 30 turns with tool calls and two sticky
// messages give back exactly the last 12 turns, both sticky messages, no broken pair, and the
// evicted messages; then a summary covers the evicted part.
func TestBuildContextThirtyTurns(t *testing.T) {
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			c := serve(t, store(t))
			sid := create(t, c, "alice")
			appendTurns(t, c, sid, "alice", 1, 30, 2, 7)
			ctxRes, err := c.BuildContext(bg, &sessionv1.BuildContextRequest{SessionId: sid, UserId: "alice"})
			if err != nil {
				t.Fatal(err)
			}
			var userTurns []string
			for _, m := range ctxRes.GetWindow() {
				if m.GetRole() == sessionv1.Role_ROLE_USER {
					userTurns = append(userTurns, strings.SplitN(m.GetContent(), ":", 2)[0])
				}
			}
			var want []string
			for i := 19; i <= 30; i++ {
				want = append(want, fmt.Sprintf("turn %d", i))
			}
			if diff := cmp.Diff(want, userTurns); diff != "" {
				t.Errorf("window turns (-want +got):\n%s", diff)
			}
			if len(ctxRes.GetWindow()) != 48 || ctxRes.GetWindowTurns() != 12 || ctxRes.GetWindowStartSeq() != 73 {
				t.Errorf("window: %d messages, %d turns, start %d", len(ctxRes.GetWindow()), ctxRes.GetWindowTurns(), ctxRes.GetWindowStartSeq())
			}
			var pinned []int64
			for _, m := range ctxRes.GetPinned() {
				pinned = append(pinned, m.GetSeq())
			}
			if diff := cmp.Diff([]int64{5, 25}, pinned); diff != "" {
				t.Errorf("pinned sticky seqs (-want +got):\n%s", diff)
			}
			checkPairs(t, ctxRes.GetWindow())
			if len(ctxRes.GetRepairs()) != 0 {
				t.Errorf("repairs on an intact log: %v", ctxRes.GetRepairs())
			}
			if n := len(ctxRes.GetEvicted()); n != 72 || ctxRes.GetEvicted()[0].GetSeq() != 1 || ctxRes.GetEvicted()[71].GetSeq() != 72 {
				t.Errorf("evicted: %d messages", n)
			}
			tok := ctxRes.GetTokens()
			if tok.GetWindow() <= 0 || tok.GetPinned() <= 0 || tok.GetTotal() != tok.GetSummary()+tok.GetPinned()+tok.GetWindow() || tok.GetEncoding() != "o200k_base" {
				t.Errorf("tokens = %v", tok)
			}

			// Fold the evicted messages into a summary: they are no longer returned.
			up, err := c.UpdateSummary(bg, &sessionv1.UpdateSummaryRequest{SessionId: sid, UserId: "alice", Content: "Goal: dinner. Facts: allergic to peanuts.", ThroughSeq: 72})
			if err != nil || up.GetPreviousThroughSeq() != 0 {
				t.Fatalf("UpdateSummary: %v %v", up, err)
			}
			again, err := c.BuildContext(bg, &sessionv1.BuildContextRequest{SessionId: sid, UserId: "alice"})
			if err != nil {
				t.Fatal(err)
			}
			if len(again.GetEvicted()) != 0 || again.GetSummary().GetContent() == "" || again.GetSummary().GetKind() != sessionv1.MessageKind_MESSAGE_KIND_SUMMARY || len(again.GetPinned()) != 2 {
				t.Errorf("after summary: %d evicted, summary %q, %d pinned", len(again.GetEvicted()), again.GetSummary().GetContent(), len(again.GetPinned()))
			}
			if _, err := c.UpdateSummary(bg, &sessionv1.UpdateSummaryRequest{SessionId: sid, UserId: "alice", Content: "older", ThroughSeq: 10}); status.Code(err) != codes.FailedPrecondition {
				t.Errorf("summary covering less: %v", err)
			}
		})
	}
}

func TestBuildContextRepairsInterruptedStep(t *testing.T) {
	c := serve(t, redisStore(t))
	sid := create(t, c, "alice")
	appendTurns(t, c, sid, "alice", 1, 2)
	// A turn whose tool step was interrupted: two calls, one result, then the user speaks.
	_, err := c.AppendMessages(bg, &sessionv1.AppendMessagesRequest{SessionId: sid, UserId: "alice", Messages: []*sessionv1.NewMessage{
		text(sessionv1.Role_ROLE_USER, "book it"),
		toolCall("x1", "make_reservation", `{"time":"19:00"}`),
		toolCall("x2", "notify", `{}`),
		toolResult("x2", "notify", `{"ok":true}`),
		text(sessionv1.Role_ROLE_USER, "hello?"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.BuildContext(bg, &sessionv1.BuildContextRequest{SessionId: sid, UserId: "alice", WindowTurns: 2})
	if err != nil {
		t.Fatal(err)
	}
	checkPairs(t, res.GetWindow())
	if len(res.GetRepairs()) != 1 || res.GetRepairs()[0].GetKind() != sessionv1.RepairKind_REPAIR_KIND_SYNTHESIZED_RESULT || res.GetRepairs()[0].GetToolCallId() != "x1" {
		t.Fatalf("repairs = %v", res.GetRepairs())
	}
	var synthesized *sessionv1.Message
	for _, m := range res.GetWindow() {
		if m.GetSynthesized() {
			synthesized = m
		}
	}
	if synthesized == nil || synthesized.GetToolCallId() != "x1" || !strings.Contains(synthesized.GetContent(), "unknown") {
		t.Errorf("synthesized result = %v", synthesized)
	}
	// The log itself is untouched.
	list, _ := c.ListMessages(bg, &sessionv1.ListMessagesRequest{SessionId: sid, UserId: "alice"})
	if len(list.GetMessages()) != 13 {
		t.Errorf("log has %d messages, want 13", len(list.GetMessages()))
	}
}

func TestBuildContextTokenBudget(t *testing.T) {
	c := serve(t, redisStore(t))
	sid := create(t, c, "alice")
	appendTurns(t, c, sid, "alice", 1, 6, 1)
	full, err := c.BuildContext(bg, &sessionv1.BuildContextRequest{SessionId: sid, UserId: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	perTurn := full.GetTokens().GetWindow() / 6
	res, err := c.BuildContext(bg, &sessionv1.BuildContextRequest{SessionId: sid, UserId: "alice", TokenBudget: perTurn * 3})
	if err != nil {
		t.Fatal(err)
	}
	if res.GetWindowTurns() >= 6 || res.GetTurnsDroppedForBudget() == 0 || res.GetTokens().GetWindow() > perTurn*3+perTurn/2 {
		t.Errorf("budget %d: %d turns, dropped %d, window %d tokens", perTurn*3, res.GetWindowTurns(), res.GetTurnsDroppedForBudget(), res.GetTokens().GetWindow())
	}
	if len(res.GetPinned()) != 1 {
		t.Errorf("the sticky message of a dropped turn is not pinned: %d pinned", len(res.GetPinned()))
	}
	one, err := c.BuildContext(bg, &sessionv1.BuildContextRequest{SessionId: sid, UserId: "alice", TokenBudget: 1})
	if err != nil || one.GetWindowTurns() != 1 {
		t.Errorf("a tiny budget keeps the current turn: %d turns, %v", one.GetWindowTurns(), err)
	}
}

func TestAppendRetryAndConflict(t *testing.T) {
	c := serve(t, redisStore(t))
	sid := create(t, c, "alice")
	req := &sessionv1.AppendMessagesRequest{SessionId: sid, UserId: "alice", ExpectedLastSeq: proto.Int64(0), Messages: []*sessionv1.NewMessage{
		{Role: sessionv1.Role_ROLE_USER, Content: "hi", ClientId: "m1"},
	}}
	first, err := c.AppendMessages(bg, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.AppendMessages(bg, req)
	if err != nil {
		t.Fatalf("a retried append failed: %v", err)
	}
	if again.GetDeduplicated() != 1 || again.GetMessages()[0].GetId() != first.GetMessages()[0].GetId() {
		t.Errorf("retry was not deduplicated: %v", again)
	}
	_, err = c.AppendMessages(bg, &sessionv1.AppendMessagesRequest{SessionId: sid, UserId: "alice", ExpectedLastSeq: proto.Int64(0), Messages: []*sessionv1.NewMessage{text(sessionv1.Role_ROLE_USER, "late")}})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "last seq is 1") {
		t.Errorf("stale expected_last_seq: %v", err)
	}
	got, _ := c.GetSession(bg, &sessionv1.GetSessionRequest{SessionId: sid, UserId: "alice"})
	if got.GetSession().GetState().GetLastSeq() != 1 || got.GetSession().GetState().GetMessageCount() != 1 {
		t.Errorf("state after conflict = %v", got.GetSession().GetState())
	}
}

func TestValidationAndAccess(t *testing.T) {
	c := serve(t, redisStore(t))
	sid := create(t, c, "alice")
	big := strings.Repeat("x", 1<<20+1)
	many := make([]*sessionv1.NewMessage, 101)
	for i := range many {
		many[i] = text(sessionv1.Role_ROLE_USER, "x")
	}
	tests := []struct {
		name   string
		call   func() error
		code   codes.Code
		fields []string
	}{
		{"create without user", func() error {
			_, err := c.CreateSession(bg, &sessionv1.CreateSessionRequest{})
			return err
		}, codes.InvalidArgument, []string{"user_id"}},
		{"append nothing", func() error {
			_, err := c.AppendMessages(bg, &sessionv1.AppendMessagesRequest{SessionId: sid, UserId: "alice"})
			return err
		}, codes.InvalidArgument, []string{"messages"}},
		{"append bad messages", func() error {
			_, err := c.AppendMessages(bg, &sessionv1.AppendMessagesRequest{SessionId: sid, UserId: "alice", Messages: []*sessionv1.NewMessage{
				{Content: "no role"},
				{Role: sessionv1.Role_ROLE_ASSISTANT, Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL, Content: "{}"},
				{Role: sessionv1.Role_ROLE_ASSISTANT, Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL, ToolCallId: "a", ToolName: "t", Sticky: true},
				{Role: sessionv1.Role_ROLE_SYSTEM, Kind: sessionv1.MessageKind_MESSAGE_KIND_SUMMARY, Content: "s"},
				{Role: sessionv1.Role_ROLE_USER, Content: "a", ClientId: "dup"},
				{Role: sessionv1.Role_ROLE_USER, Content: "b", ClientId: "dup"},
			}})
			return err
		}, codes.InvalidArgument, []string{"messages[0].role", "messages[1].tool_call_id", "messages[1].tool_name", "messages[2].sticky", "messages[3].kind", "messages[5].client_id"}},
		{"content too large", func() error {
			_, err := c.AppendMessages(bg, &sessionv1.AppendMessagesRequest{SessionId: sid, UserId: "alice", Messages: []*sessionv1.NewMessage{text(sessionv1.Role_ROLE_USER, big)}})
			return err
		}, codes.ResourceExhausted, nil},
		{"batch too large", func() error {
			_, err := c.AppendMessages(bg, &sessionv1.AppendMessagesRequest{SessionId: sid, UserId: "alice", Messages: many})
			return err
		}, codes.ResourceExhausted, nil},
		{"append with bad context options", func() error {
			_, err := c.AppendMessages(bg, &sessionv1.AppendMessagesRequest{SessionId: sid, UserId: "alice", Messages: []*sessionv1.NewMessage{text(sessionv1.Role_ROLE_USER, "x")},
				BuildContext: &sessionv1.BuildContextRequest{SessionId: "01HZZZZZZZZZZZZZZZZZZZZZZZ", UserId: "mallory", WindowTurns: -1, TokenBudget: 1 << 30, MaxEvicted: 1 << 20, MaxMessageBytes: -5}})
			return err
		}, codes.InvalidArgument, []string{"build_context.session_id", "build_context.user_id", "build_context.window_turns", "build_context.token_budget", "build_context.max_evicted", "build_context.max_message_bytes"}},
		{"another user appends to build a context", func() error {
			_, err := c.AppendMessages(bg, &sessionv1.AppendMessagesRequest{SessionId: sid, UserId: "mallory", Messages: []*sessionv1.NewMessage{text(sessionv1.Role_ROLE_USER, "x")},
				BuildContext: &sessionv1.BuildContextRequest{}})
			return err
		}, codes.PermissionDenied, nil},
		{"page too large", func() error {
			_, err := c.ListMessages(bg, &sessionv1.ListMessagesRequest{SessionId: sid, UserId: "alice", PageSize: 5000})
			return err
		}, codes.InvalidArgument, []string{"page_size"}},
		{"another user's session", func() error {
			_, err := c.BuildContext(bg, &sessionv1.BuildContextRequest{SessionId: sid, UserId: "mallory"})
			return err
		}, codes.PermissionDenied, nil},
		{"another user appends", func() error {
			_, err := c.AppendMessages(bg, &sessionv1.AppendMessagesRequest{SessionId: sid, UserId: "mallory", Messages: []*sessionv1.NewMessage{text(sessionv1.Role_ROLE_USER, "x")}})
			return err
		}, codes.PermissionDenied, nil},
		{"unknown session", func() error {
			_, err := c.GetSession(bg, &sessionv1.GetSessionRequest{SessionId: "01HZZZZZZZZZZZZZZZZZZZZZZZ", UserId: "alice"})
			return err
		}, codes.NotFound, nil},
		{"search without words", func() error {
			_, err := c.SearchMessages(bg, &sessionv1.SearchMessagesRequest{UserId: "alice", Query: "?!"})
			return err
		}, codes.InvalidArgument, []string{"query"}},
		{"forged page token", func() error {
			_, err := c.ListSessions(bg, &sessionv1.ListSessionsRequest{UserId: "alice", PageToken: "zzz"})
			return err
		}, codes.InvalidArgument, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if status.Code(err) != tc.code {
				t.Fatalf("code = %v (%v), want %v", status.Code(err), err, tc.code)
			}
			var fields []string
			for _, f := range rpc.FieldViolations(err) {
				fields = append(fields, f.GetField())
			}
			if tc.fields != nil {
				if diff := cmp.Diff(tc.fields, fields); diff != "" {
					t.Errorf("field violations (-want +got):\n%s", diff)
				}
			}
		})
	}
	// Nothing of the failed requests was stored.
	got, _ := c.GetSession(bg, &sessionv1.GetSessionRequest{SessionId: sid, UserId: "alice"})
	if got.GetSession().GetState().GetLastSeq() != 0 {
		t.Errorf("failed requests stored messages: %v", got.GetSession().GetState())
	}
}

func TestSearchThroughGRPC(t *testing.T) {
	c := serve(t, redisStore(t))
	a := create(t, c, "alice")
	appendTurns(t, c, a, "alice", 1, 3)
	res, err := c.SearchMessages(bg, &sessionv1.SearchMessagesRequest{UserId: "alice", Query: "peanuts"})
	if err != nil || len(res.GetHits()) != 0 {
		t.Fatalf("search for an absent word: %v %v", res, err)
	}
	res, err = c.SearchMessages(bg, &sessionv1.SearchMessagesRequest{UserId: "alice", Query: "restaurant", PageSize: 2, Neighbors: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.GetHits()) != 2 || res.GetHits()[0].GetMessage().GetSeq() != 9 || len(res.GetHits()[0].GetAfter()) != 2 || len(res.GetHits()[0].GetBefore()) != 2 {
		t.Errorf("hits = %v", res.GetHits())
	}
	if other, _ := c.SearchMessages(bg, &sessionv1.SearchMessagesRequest{UserId: "mallory", Query: "restaurant"}); len(other.GetHits()) != 0 {
		t.Error("another user's search sees alice's messages")
	}
}

// TestSurvivesRestart: the embedded store keeps everything across a restart of the service.
func TestSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "session.db")
	store := boltStore(t, path)
	c := serve(t, store)
	sid := create(t, c, "alice")
	appendTurns(t, c, sid, "alice", 1, 30, 2, 7)
	before, err := c.BuildContext(bg, &sessionv1.BuildContextRequest{SessionId: sid, UserId: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	_ = store.Close()

	c2 := serve(t, boltStore(t, path))
	after, err := c2.BuildContext(bg, &sessionv1.BuildContextRequest{SessionId: sid, UserId: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(before, after) {
		t.Error("BuildContext differs after a restart")
	}
}

// TestBuildContextFoldsThroughGRPC plays 30 turns on each store the way the orchestrator does,
// storing a summary through the last evicted message whenever BuildContext evicts some. Every
// message after the summary is in the window or evicted; the window holds N to N+K-1 turns;
// summaries happen every K turns, each folding K turns, the first once N+K turns exist.
func TestBuildContextFoldsThroughGRPC(t *testing.T) {
	tests := []struct {
		name         string
		window, fold int
		budget       int
		// cadence: whether the summaries' turns are checked (a tight budget evicts more often).
		cadence bool
	}{
		{name: "window 12 fold 4", window: 12, fold: 4, cadence: true},
		{name: "window 3 fold 1", window: 3, fold: 1, cadence: true},
		{name: "window 3 fold 0 (a Config built in code) is fold 1", window: 3, fold: 0, cadence: true},
		{name: "window 5 fold 3", window: 5, fold: 3, cadence: true},
		{name: "window 6 fold 4 tight budget", window: 6, fold: 4, budget: 350},
	}
	for name, store := range stores {
		for _, tc := range tests {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				budget := tc.budget
				if budget == 0 {
					budget = 100_000
				}
				c := serveConfig(t, store(t), session.Config{WindowTurns: tc.window, TokenBudget: budget, MaxEvicted: 200, FoldTurns: tc.fold})
				fold := max(tc.fold, 1)
				sid := create(t, c, "alice")
				var through int64
				var summarised []int
				budgetDrops := 0
				for turn := 1; turn <= 30; turn++ {
					appendTurns(t, c, sid, "alice", turn, 1, 2, 7, 13)
					res, err := c.BuildContext(bg, &sessionv1.BuildContextRequest{SessionId: sid, UserId: "alice"})
					if err != nil {
						t.Fatal(err)
					}
					list, err := c.ListMessages(bg, &sessionv1.ListMessagesRequest{SessionId: sid, UserId: "alice", PageSize: 1000})
					if err != nil {
						t.Fatal(err)
					}
					checkFold(t, turn, list.GetMessages(), res, through)
					budgetDrops += int(res.GetTurnsDroppedForBudget())
					if !tc.cadence {
						if n := res.GetWindowTurns(); n > int32(tc.window+fold-1) {
							t.Fatalf("turn %d: %d turns in the window, at most %d", turn, n, tc.window+fold-1)
						}
					} else if n, lo, hi := int(res.GetWindowTurns()), min(turn, tc.window), min(turn, tc.window+fold-1); n < lo || n > hi {
						t.Fatalf("turn %d: %d turns in the window, want %d to %d", turn, n, lo, hi)
					}
					ev := res.GetEvicted()
					if len(ev) == 0 {
						continue
					}
					if tc.cadence && len(ev) != 4*fold {
						t.Errorf("turn %d: %d messages evicted, want %d turns of 4", turn, len(ev), fold)
					}
					through = ev[len(ev)-1].GetSeq()
					if _, err := c.UpdateSummary(bg, &sessionv1.UpdateSummaryRequest{SessionId: sid, UserId: "alice", Content: fmt.Sprintf("through %d", through), ThroughSeq: through}); err != nil {
						t.Fatal(err)
					}
					summarised = append(summarised, turn)
				}
				if !tc.cadence {
					if len(summarised) == 0 || budgetDrops == 0 {
						t.Errorf("%d summaries and %d turns dropped for the budget in 30 turns", len(summarised), budgetDrops)
					}
					return
				}
				var want []int
				for turn := tc.window + fold; turn <= 30; turn += fold {
					want = append(want, turn)
				}
				if diff := cmp.Diff(want, summarised); diff != "" {
					t.Errorf("turns that stored a summary (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// checkFold asserts that a built context leaves no message between the summary (through) and
// the window: the evicted messages are exactly those before window_start_seq and after the
// summary. Sticky messages before the window are pinned, the window starts at a user message.
func checkFold(t *testing.T, turn int, all []*sessionv1.Message, res *sessionv1.BuildContextResponse, through int64) {
	t.Helper()
	if got := res.GetSummary().GetSeq(); got != through {
		t.Fatalf("turn %d: summary through %d, want %d", turn, got, through)
	}
	if res.GetEvictedTruncated() {
		t.Fatalf("turn %d: evicted truncated", turn)
	}
	start := res.GetWindowStartSeq()
	var between, pinned, evicted, gotPinned []int64
	for _, m := range all {
		if m.GetSeq() >= start {
			break
		}
		if m.GetSeq() > through {
			between = append(between, m.GetSeq())
		}
		if m.GetSticky() {
			pinned = append(pinned, m.GetSeq())
		}
	}
	for _, m := range res.GetEvicted() {
		evicted = append(evicted, m.GetSeq())
	}
	for _, m := range res.GetPinned() {
		gotPinned = append(gotPinned, m.GetSeq())
	}
	if diff := cmp.Diff(between, evicted); diff != "" {
		t.Fatalf("turn %d: summary through %d, window from %d: evicted (-between +evicted):\n%s", turn, through, start, diff)
	}
	if diff := cmp.Diff(pinned, gotPinned); diff != "" {
		t.Fatalf("turn %d: pinned (-want +got):\n%s", turn, diff)
	}
	if w := res.GetWindow(); len(w) == 0 || w[0].GetSeq() != start || w[0].GetRole() != sessionv1.Role_ROLE_USER || w[len(w)-1].GetSeq() != all[len(all)-1].GetSeq() {
		t.Fatalf("turn %d: window from %d is not the log's tail from a user message", turn, start)
	}
}

// TestFoldTurnsLimit: fold-turns beyond 200 is refused; zero or less is fold 1.
func TestFoldTurnsLimit(t *testing.T) {
	tok, err := tokenizer.New("o200k_base")
	if err != nil {
		t.Fatal(err)
	}
	store := redisStore(t)
	for _, fold := range []int{-1, 0, 1, 200, 201} {
		_, err := session.NewService(session.Config{FoldTurns: fold}, session.Options{Store: store, Tokenizer: tok, Logger: quiet})
		if (err != nil) != (fold > 200) {
			t.Errorf("fold-turns %d: %v", fold, err)
		}
	}
}

// TestOwnershipCacheAcrossReplicas: two replicas share a store. Once a replica has served a
// session, its cached owner still refuses another user, and a session deleted through the other
// replica is gone for it too (the store operations fail, not the cache's check).
func TestOwnershipCacheAcrossReplicas(t *testing.T) {
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			store := open(t)
			a, b := serve(t, store), serve(t, store)
			sid := create(t, a, "alice")
			appendTurns(t, b, sid, "alice", 0, 1) // b caches the session's owner
			if _, err := b.BuildContext(ctx, &sessionv1.BuildContextRequest{SessionId: sid, UserId: "alice"}); err != nil {
				t.Fatal(err)
			}
			_, err := b.AppendMessages(ctx, &sessionv1.AppendMessagesRequest{SessionId: sid, UserId: "mallory", Messages: []*sessionv1.NewMessage{text(sessionv1.Role_ROLE_USER, "hi")}})
			if status.Code(err) != codes.PermissionDenied {
				t.Errorf("another user's append through the replica that cached the owner: %v, want PermissionDenied", err)
			}
			if _, err := b.BuildContext(ctx, &sessionv1.BuildContextRequest{SessionId: sid, UserId: "mallory"}); status.Code(err) != codes.PermissionDenied {
				t.Errorf("another user's BuildContext: %v, want PermissionDenied", err)
			}
			if _, err := a.DeleteSession(ctx, &sessionv1.DeleteSessionRequest{SessionId: sid, UserId: "alice"}); err != nil {
				t.Fatal(err)
			}
			_, err = b.AppendMessages(ctx, &sessionv1.AppendMessagesRequest{SessionId: sid, UserId: "alice", Messages: []*sessionv1.NewMessage{text(sessionv1.Role_ROLE_USER, "hi")}})
			if status.Code(err) != codes.NotFound {
				t.Errorf("append to a session deleted through the other replica: %v, want NotFound", err)
			}
			if _, err := b.BuildContext(ctx, &sessionv1.BuildContextRequest{SessionId: sid, UserId: "alice"}); status.Code(err) != codes.NotFound {
				t.Errorf("BuildContext of a session deleted through the other replica: %v, want NotFound", err)
			}
		})
	}
}

// TestAppendBuildsContext: an append with build_context returns the context BuildContext gives
// right after it, on every store, with the request's options applied.
func TestAppendBuildsContext(t *testing.T) {
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			c := serve(t, open(t))
			sid := create(t, c, "alice")
			appendTurns(t, c, sid, "alice", 1, 14, 2)
			opts := &sessionv1.BuildContextRequest{WindowTurns: 3, MaxMessageBytes: 1000}
			res, err := c.AppendMessages(bg, &sessionv1.AppendMessagesRequest{SessionId: sid, UserId: "alice",
				Messages: []*sessionv1.NewMessage{text(sessionv1.Role_ROLE_USER, "and now a table for two")}, BuildContext: opts})
			if err != nil {
				t.Fatal(err)
			}
			want, err := c.BuildContext(bg, &sessionv1.BuildContextRequest{SessionId: sid, UserId: "alice", WindowTurns: 3, MaxMessageBytes: 1000})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, res.GetContext(), protocmp.Transform()); diff != "" {
				t.Errorf("context of the append differs from BuildContext's (-want +got):\n%s", diff)
			}
			win := res.GetContext().GetWindow()
			if len(win) == 0 || win[len(win)-1].GetSeq() != res.GetMessages()[0].GetSeq() {
				t.Errorf("the window does not end with the appended message: %v", win)
			}
			if res.GetContext().GetWindowTurns() != 3 || len(res.GetContext().GetPinned()) != 1 {
				t.Errorf("window turns %d, pinned %d; want 3 and 1", res.GetContext().GetWindowTurns(), len(res.GetContext().GetPinned()))
			}
			// Without build_context there is none.
			plain, err := c.AppendMessages(bg, &sessionv1.AppendMessagesRequest{SessionId: sid, UserId: "alice", Messages: []*sessionv1.NewMessage{text(sessionv1.Role_ROLE_ASSISTANT, "done")}})
			if err != nil {
				t.Fatal(err)
			}
			if plain.GetContext() != nil {
				t.Errorf("an append without build_context returned a context")
			}
		})
	}
}
