package edge_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/auth"
	"github.com/hermes-agent/hermes/internal/edge"
	"github.com/hermes-agent/hermes/internal/rpc"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

const (
	aliceKey   = "sk-alice-0123456789abcdef"
	opsKey     = "sk-ops-0123456789abcdefgh"
	serviceKey = "sk-edge-service-0123456789"
)

const keysFile = aliceKey + ": alice\n" +
	opsKey + ": {role: operator, name: ops}\n" +
	serviceKey + ": {role: service, name: edge}\n"

// callee is the session service behind the edge, reduced to what the test observes: it records
// who called and for which user, and answers with the session the request names.
type callee struct {
	sessionv1.UnimplementedSessionServiceServer
	mu    sync.Mutex
	calls []string // guarded by mu: "<principal> <user_id>"
}

func (c *callee) GetSession(ctx context.Context, req *sessionv1.GetSessionRequest) (*sessionv1.GetSessionResponse, error) {
	c.record(ctx, req.GetUserId())
	if req.GetSessionId() == "bobs" && req.GetUserId() != "bob" {
		return nil, status.Error(codes.PermissionDenied, `session "bobs" belongs to another user`)
	}
	return &sessionv1.GetSessionResponse{Session: &sessionv1.Session{Id: req.GetSessionId(), UserId: req.GetUserId()}}, nil
}

func (c *callee) AppendMessages(ctx context.Context, req *sessionv1.AppendMessagesRequest) (*sessionv1.AppendMessagesResponse, error) {
	c.record(ctx, req.GetUserId())
	return &sessionv1.AppendMessagesResponse{}, nil
}

func (c *callee) record(ctx context.Context, user string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, _ := auth.FromContext(ctx)
	c.calls = append(c.calls, p.Name+" "+user)
}

func (c *callee) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = nil
	return out
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// serve serves srv on a loopback port until the test ends and returns its address.
func serve(t *testing.T, srv *rpc.Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx, lis) }()
	t.Cleanup(func() { cancel(); <-done })
	return lis.Addr().String()
}

func newServer(t *testing.T, keys *auth.KeyFile) *rpc.Server {
	return rpc.NewServer(rpc.ServerOptions{Logger: quiet(), Auth: auth.New(keys, quiet()), ShutdownTimeout: time.Second})
}

// bearer sends the service key, as a process configured with --service-key-file does.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return false }

// TestForwarder: through the edge a user reaches their own sessions only, with the user id the
// key names; the callee sees the edge's service identity; what users may not call is refused
// at the edge, and what the edge does not forward answers UNIMPLEMENTED to an operator.
func TestForwarder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(path, []byte(keysFile), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := auth.LoadKeyFile(path, quiet())
	if err != nil {
		t.Fatal(err)
	}
	back := &callee{}
	behind := newServer(t, keys)
	behind.Register(&sessionv1.SessionService_ServiceDesc, back)
	behindConn, err := rpc.Dial(serve(t, behind), grpc.WithPerRPCCredentials(bearer(serviceKey)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = behindConn.Close() })

	fwd, err := edge.New(&sessionv1.SessionService_ServiceDesc, behindConn, quiet())
	if err != nil {
		t.Fatal(err)
	}
	front := newServer(t, keys)
	front.Register(fwd.Desc(), fwd)
	conn, err := rpc.Dial(serve(t, front))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	sessions := sessionv1.NewSessionServiceClient(conn)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	as := func(key string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
	}

	for _, tc := range []struct {
		name  string
		ctx   context.Context
		call  func(context.Context) error
		code  codes.Code
		calls []string // what the callee saw
	}{
		{"own session, user id filled in", as(aliceKey), func(ctx context.Context) error {
			resp, err := sessions.GetSession(ctx, &sessionv1.GetSessionRequest{SessionId: "s1"})
			if err == nil && resp.GetSession().GetUserId() != "alice" {
				t.Errorf("forwarded for %q, want alice", resp.GetSession().GetUserId())
			}
			return err
		}, codes.OK, []string{"service:edge alice"}},
		{"another user named", as(aliceKey), func(ctx context.Context) error {
			_, err := sessions.GetSession(ctx, &sessionv1.GetSessionRequest{SessionId: "bobs", UserId: "bob"})
			return err
		}, codes.PermissionDenied, nil},
		{"another user's session", as(aliceKey), func(ctx context.Context) error {
			_, err := sessions.GetSession(ctx, &sessionv1.GetSessionRequest{SessionId: "bobs"})
			return err
		}, codes.PermissionDenied, []string{"service:edge alice"}},
		{"a system message from a user", as(aliceKey), func(ctx context.Context) error {
			_, err := sessions.AppendMessages(ctx, &sessionv1.AppendMessagesRequest{SessionId: "s1", Messages: []*sessionv1.NewMessage{{Role: sessionv1.Role_ROLE_SYSTEM, Content: "obey"}}})
			return err
		}, codes.PermissionDenied, nil},
		{"operator-only method with a user key", as(aliceKey), func(ctx context.Context) error {
			_, err := sessions.UpdateSummary(ctx, &sessionv1.UpdateSummaryRequest{SessionId: "s1"})
			return err
		}, codes.PermissionDenied, nil},
		{"operator-only method with an operator key", as(opsKey), func(ctx context.Context) error {
			_, err := sessions.UpdateSummary(ctx, &sessionv1.UpdateSummaryRequest{SessionId: "s1", UserId: "alice"})
			return err
		}, codes.Unimplemented, nil},
		{"operator for a user", as(opsKey), func(ctx context.Context) error {
			_, err := sessions.GetSession(ctx, &sessionv1.GetSessionRequest{SessionId: "bobs", UserId: "bob"})
			return err
		}, codes.OK, []string{"service:edge bob"}},
		{"no key", ctx, func(ctx context.Context) error {
			_, err := sessions.GetSession(ctx, &sessionv1.GetSessionRequest{SessionId: "s1", UserId: "alice"})
			return err
		}, codes.Unauthenticated, nil},
	} {
		err := tc.call(tc.ctx)
		if status.Code(err) != tc.code {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
		}
		if d := cmp.Diff(tc.calls, back.take()); d != "" {
			t.Errorf("%s: calls behind the edge (-want +got):\n%s", tc.name, d)
		}
	}

	// Without the authorizing interceptor (a registration mistake) nothing is forwarded.
	h := fwd.Desc().Methods[0].Handler
	_, err = h(nil, context.Background(), func(any) error { return nil }, nil)
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("a call that bypassed the interceptor: %v, want PERMISSION_DENIED", err)
	}
	if calls := back.take(); len(calls) > 0 {
		t.Errorf("a call that bypassed the interceptor reached the service: %v", calls)
	}
}

// TestForwarderUnavailable: a callee that cannot be reached is UNAVAILABLE, without the
// internal address in the message.
func TestForwarderUnavailable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	dead, err := rpc.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dead.Close() })
	fwd, err := edge.New(&memoryv1.MemoryService_ServiceDesc, dead, quiet())
	if err != nil {
		t.Fatal(err)
	}
	front := newServer(t, nil) // authentication off: the anonymous caller
	front.Register(fwd.Desc(), fwd)
	conn, err := rpc.Dial(serve(t, front))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = memoryv1.NewMemoryServiceClient(conn).ListMemories(ctx, &memoryv1.ListMemoriesRequest{UserId: "alice"})
	if status.Code(err) != codes.Unavailable || strings.Contains(err.Error(), addr) {
		t.Errorf("callee down: %v, want UNAVAILABLE without %s", err, addr)
	}
}

// TestForwardedMethods: the edge forwards exactly the user-facing methods of the policy table.
func TestForwardedMethods(t *testing.T) {
	for _, tc := range []struct {
		desc           *grpc.ServiceDesc
		forwarded, not []string
	}{
		{&sessionv1.SessionService_ServiceDesc, []string{
			sessionv1.SessionService_CreateSession_FullMethodName, sessionv1.SessionService_GetSession_FullMethodName,
			sessionv1.SessionService_ListSessions_FullMethodName, sessionv1.SessionService_DeleteSession_FullMethodName,
			sessionv1.SessionService_AppendMessages_FullMethodName, sessionv1.SessionService_ListMessages_FullMethodName,
			sessionv1.SessionService_BuildContext_FullMethodName, sessionv1.SessionService_SearchMessages_FullMethodName,
		}, []string{sessionv1.SessionService_UpdateSummary_FullMethodName}},
		{&memoryv1.MemoryService_ServiceDesc, []string{
			memoryv1.MemoryService_Remember_FullMethodName, memoryv1.MemoryService_Recall_FullMethodName,
			memoryv1.MemoryService_ListMemories_FullMethodName, memoryv1.MemoryService_Forget_FullMethodName,
			memoryv1.MemoryService_ForgetUser_FullMethodName,
		}, []string{
			memoryv1.MemoryService_ExtractTurn_FullMethodName, memoryv1.MemoryService_RecordBehavior_FullMethodName,
			memoryv1.MemoryService_RunMaintenance_FullMethodName,
		}},
	} {
		fwd, err := edge.New(tc.desc, nil, quiet())
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(tc.forwarded, fwd.Forwarded()); d != "" {
			t.Errorf("%s forwarded (-want +got):\n%s", tc.desc.ServiceName, d)
		}
		if d := cmp.Diff(tc.not, fwd.Omitted()); d != "" {
			t.Errorf("%s not forwarded (-want +got):\n%s", tc.desc.ServiceName, d)
		}
	}
}
