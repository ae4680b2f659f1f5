package rpc

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/auth"
)

// TestLocalUnaryMatchesInProcess calls a unary method through LocalUnary and through the
// in-process channel: the handler sees the same context (the in-process principal, not the
// caller's; the caller's outgoing metadata, not its incoming; no caller values; the deadline;
// the interceptors) and the caller gets the same answers, errors and panics included.
func TestLocalUnaryMatchesInProcess(t *testing.T) {
	mark := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(context.WithValue(ctx, ctxKey("interceptor"), "yes"), req)
	}
	srv := NewServer(ServerOptions{Logger: quiet, Unary: []grpc.UnaryServerInterceptor{mark}})
	svc := &seeingService{}
	srv.Register(&testpb.TestService_ServiceDesc, svc)
	client := testpb.NewTestServiceClient(srv.InProcess())
	local := LocalUnary(srv, testpb.TestService_UnaryCall_FullMethodName, svc.UnaryCall)

	type answer struct {
		Username string
		Code     codes.Code
		Message  string
	}
	of := func(resp *testpb.SimpleResponse, err error) answer {
		return answer{resp.GetUsername(), status.Code(err), status.Convert(err).Message()}
	}
	// The caller is a handler of another call: its own principal and incoming metadata must not
	// reach the callee.
	base := context.WithValue(context.Background(), ctxKey("caller"), "leaked")
	base = auth.NewContext(base, auth.Principal{Role: auth.RoleUser, Name: "alice", User: "alice"})
	base = metadata.NewIncomingContext(base, metadata.Pairs("x-who", "the outer caller"))
	cases := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		req  *testpb.SimpleRequest
	}{
		{"metadata and deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(metadata.AppendToOutgoingContext(base, "x-who", "张三"), time.Minute)
		}, &testpb.SimpleRequest{FillOauthScope: true}},
		{"no metadata", func() (context.Context, context.CancelFunc) { return context.WithCancel(base) }, &testpb.SimpleRequest{}},
		{"panic", func() (context.Context, context.CancelFunc) { return context.WithCancel(base) }, &testpb.SimpleRequest{ResponseSize: 1}},
		{"caller's deadline ends the handler", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(base, 50*time.Millisecond)
		}, &testpb.SimpleRequest{ResponseSize: 2}},
		{"caller's cancellation ends the handler", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(base)
			time.AfterFunc(20*time.Millisecond, cancel)
			return ctx, cancel
		}, &testpb.SimpleRequest{ResponseSize: 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := tc.ctx()
			defer cancel()
			viaChannel := of(client.UnaryCall(ctx, tc.req))
			ctx, cancel = tc.ctx()
			defer cancel()
			direct := of(local(ctx, tc.req))
			if diff := cmp.Diff(viaChannel, direct); diff != "" {
				t.Errorf("local call differs from the channel's (-channel +local):\n%s", diff)
			}
			if tc.req.GetResponseSize() == 0 && direct.Username == "" {
				t.Errorf("no answer: %+v", direct)
			}
		})
	}

	t.Run("the handler gets the request itself", func(t *testing.T) {
		req := &testpb.SimpleRequest{}
		if _, err := local(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		if svc.lastReq.Load() != req {
			t.Error("the handler got a copy")
		}
	})

	t.Run("invalid UTF-8 is refused before the handler", func(t *testing.T) {
		svc.lastReq.Store(nil)
		req := &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Message: "ok \xff"}}
		_, err := local(context.Background(), req)
		want := answer{Code: codes.InvalidArgument, Message: "invalid request: response_status.message is not valid UTF-8"}
		if diff := cmp.Diff(want, of(nil, err)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		if svc.lastReq.Load() != nil {
			t.Error("the handler ran")
		}
	})
}

// TestLocalUnaryAuthorizes: a local call is authorized against the policy table as the
// in-process principal, as a call on the in-process channel is; a method without a policy
// entry is refused on both.
func TestLocalUnaryAuthorizes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(path, []byte("sk-alice-0123456789abcdef: alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := auth.LoadKeyFile(path, quiet)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(ServerOptions{Logger: quiet, Auth: auth.New(keys, quiet)})
	svc := &seeingService{}
	srv.Register(&testpb.TestService_ServiceDesc, svc)
	_, viaChannel := testpb.NewTestServiceClient(srv.InProcess()).UnaryCall(context.Background(), &testpb.SimpleRequest{})
	_, direct := LocalUnary(srv, testpb.TestService_UnaryCall_FullMethodName, svc.UnaryCall)(context.Background(), &testpb.SimpleRequest{})
	if status.Code(direct) != codes.PermissionDenied {
		t.Fatalf("local call of a method without a policy: %v, want PERMISSION_DENIED", direct)
	}
	if diff := cmp.Diff(status.Convert(viaChannel).String(), status.Convert(direct).String()); diff != "" {
		t.Errorf("local refusal differs from the channel's (-channel +local):\n%s", diff)
	}
	if svc.lastReq.Load() != nil {
		t.Error("the handler ran")
	}
}

func BenchmarkLocalUnary(b *testing.B) {
	srv := NewServer(ServerOptions{Logger: quiet})
	svc := &testService{}
	srv.Register(&testpb.TestService_ServiceDesc, svc)
	ctx := context.Background()
	req := &testpb.SimpleRequest{}
	b.Run("channel", func(b *testing.B) {
		c := testpb.NewTestServiceClient(srv.InProcess())
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.UnaryCall(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("local", func(b *testing.B) {
		call := LocalUnary(srv, testpb.TestService_UnaryCall_FullMethodName, svc.UnaryCall)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := call(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
