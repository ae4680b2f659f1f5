package rpc

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/auth"
)

type ctxKey string

// seeingService answers with what its handler's context shows.
type seeingService struct {
	testpb.UnimplementedTestServiceServer
	// lastReq is the last request a handler got; grpchan's handler of a call the caller gave up
	// on may still run when the next call starts.
	lastReq atomic.Pointer[testpb.SimpleRequest]
}

func (s *seeingService) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	s.lastReq.Store(req)
	if req.GetResponseSize() == 1 {
		var m map[string]int
		m["boom"]++
	}
	if req.GetResponseSize() == 2 {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	md, _ := metadata.FromIncomingContext(ctx)
	p, _ := peer.FromContext(ctx)
	_, hasDeadline := ctx.Deadline()
	who, _ := auth.FromContext(ctx)
	_ = grpc.SetHeader(ctx, metadata.Pairs("h", "1"))
	return &testpb.SimpleResponse{Username: fmt.Sprintf("md=%v peer=%s/%s deadline=%v callerValue=%v intercepted=%v method=%v principal=%s",
		md.Get("x-who"), p.Addr.Network(), p.Addr, hasDeadline, ctx.Value(ctxKey("caller")), ctx.Value(ctxKey("interceptor")), grpc.ServerTransportStreamFromContext(ctx).Method(), who.Name),
		OauthScope: fmt.Sprint(req.GetFillOauthScope())}, nil
}

// TestInProcessUnaryMatchesGrpchan calls a unary method in process on the caller's goroutine
// and, with an option that takes grpchan's path, on a goroutine of its own: the handler sees the
// same context (metadata, peer, deadline, no caller values, the interceptors) and the caller the
// same answers, errors and panics included.
func TestInProcessUnaryMatchesGrpchan(t *testing.T) {
	mark := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(context.WithValue(ctx, ctxKey("interceptor"), "yes"), req)
	}
	srv := NewServer(ServerOptions{Logger: quiet, Unary: []grpc.UnaryServerInterceptor{mark}})
	svc := &seeingService{}
	srv.Register(&testpb.TestService_ServiceDesc, svc)
	client := testpb.NewTestServiceClient(srv.InProcess())

	type answer struct {
		Username string
		Code     codes.Code
	}
	call := func(ctx context.Context, req *testpb.SimpleRequest, opts ...grpc.CallOption) answer {
		resp, err := client.UnaryCall(ctx, req, opts...)
		return answer{resp.GetUsername(), status.Code(err)}
	}
	base := context.WithValue(context.Background(), ctxKey("caller"), "leaked")
	cases := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		req  *testpb.SimpleRequest
	}{
		{"metadata and deadline", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(base, "x-who", "张三"), time.Minute)
			return ctx, cancel
		}, &testpb.SimpleRequest{FillOauthScope: true}},
		{"no metadata", func() (context.Context, context.CancelFunc) { return context.WithCancel(base) }, &testpb.SimpleRequest{}},
		{"panic", func() (context.Context, context.CancelFunc) { return context.WithCancel(base) }, &testpb.SimpleRequest{ResponseSize: 1}},
		{"caller's deadline ends the handler", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(base, 50*time.Millisecond)
		}, &testpb.SimpleRequest{ResponseSize: 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := tc.ctx()
			defer cancel()
			direct := call(ctx, tc.req)
			var hdr metadata.MD
			viaGrpchan := call(ctx, tc.req, grpc.Header(&hdr))
			if diff := cmp.Diff(viaGrpchan, direct); diff != "" {
				t.Errorf("direct call differs from grpchan's (-grpchan +direct):\n%s", diff)
			}
			if tc.req.GetResponseSize() == 0 && direct.Username == "" {
				t.Errorf("no answer: %+v", direct)
			}
		})
	}

	t.Run("the handler gets a copy of the request and the caller a copy of the response", func(t *testing.T) {
		req := &testpb.SimpleRequest{FillOauthScope: true}
		resp, err := client.UnaryCall(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if svc.lastReq.Load() == req {
			t.Error("the handler got the caller's request message itself")
		}
		if resp.GetUsername() == "" {
			t.Error("empty response")
		}
	})
}

// derivingService's handler derives contexts from its own, as handlers do for their timeouts,
// and reports how many goroutines that started; with ResponseSize 2 it then waits until a
// derived context ends.
type derivingService struct {
	testpb.UnimplementedTestServiceServer
	derived chan struct{} // gets a value when the contexts of a waiting call are derived
}

func (s *derivingService) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	const n = 200
	before := runtime.NumGoroutine()
	cancels := make([]context.CancelFunc, n)
	var last context.Context
	for i := range cancels {
		last, cancels[i] = context.WithTimeout(ctx, time.Hour)
	}
	started := runtime.NumGoroutine() - before
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	if req.GetResponseSize() == 2 {
		select {
		case s.derived <- struct{}{}:
		default:
		}
		<-last.Done()
		return nil, status.FromContextError(last.Err()).Err()
	}
	return &testpb.SimpleResponse{Username: fmt.Sprint(started)}, nil
}

// TestInProcessDerivedContexts: contexts a handler of an in-process call derives from its
// context start no goroutine each (they register with the caller's context), and still end
// when the caller gives up or its deadline passes, with the caller's reason.
func TestInProcessDerivedContexts(t *testing.T) {
	srv := NewServer(ServerOptions{Logger: quiet})
	svc := &derivingService{derived: make(chan struct{}, 1)}
	srv.Register(&testpb.TestService_ServiceDesc, svc)
	client := testpb.NewTestServiceClient(srv.InProcess())

	resp, err := client.UnaryCall(context.Background(), &testpb.SimpleRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// 200 derived contexts started 200 goroutines before; a few may start elsewhere meanwhile.
	if started, _ := strconv.Atoi(resp.GetUsername()); started >= 50 {
		t.Errorf("deriving 200 contexts in the handler started %d goroutines, want none", started)
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-svc.derived
		cancel()
	}()
	_, err = client.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 2})
	if got := status.Code(err); got != codes.Canceled {
		t.Errorf("a call whose caller gave up ended with %v (%v), want Canceled", got, err)
	}

	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = client.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 2})
	if got := status.Code(err); got != codes.DeadlineExceeded {
		t.Errorf("a call past its caller's deadline ended with %v (%v), want DeadlineExceeded", got, err)
	}
}

// TestInProcessStreamRefusal replays a refusal that reached HTTP clients as "EOF" (500): a
// stream interceptor that refuses a server-streaming call before its handler reads the request
// ends the stream while the caller sends it, and the caller must get the interceptor's status,
// every time, as it does over the network.
func TestInProcessStreamRefusal(t *testing.T) {
	refuse := func(any, grpc.ServerStream, *grpc.StreamServerInfo, grpc.StreamHandler) error {
		return status.Error(codes.ResourceExhausted, "refused")
	}
	srv := NewServer(ServerOptions{Logger: quiet, Stream: []grpc.StreamServerInterceptor{refuse}})
	srv.Register(&testpb.TestService_ServiceDesc, &seeingService{})
	client := testpb.NewTestServiceClient(srv.InProcess())
	got := map[string]int{}
	for range 300 {
		st, err := client.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{})
		if err == nil {
			_, err = st.Recv()
		}
		got[status.Convert(err).Code().String()+": "+status.Convert(err).Message()]++
	}
	if diff := cmp.Diff(map[string]int{"ResourceExhausted: refused": 300}, got); diff != "" {
		t.Errorf("refused calls' errors (-want +got):\n%s", diff)
	}
}
