package rpc

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/backoff"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testService behaves by the request's fill_username flag and response size: a size of 1 panics,
// 2 blocks until released, 3 fails with UNAVAILABLE until `failures` calls have been made.
type testService struct {
	testpb.UnimplementedTestServiceServer
	release  chan struct{}
	started  chan struct{}
	failures int32
	calls    atomic.Int32
}

func (s *testService) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	n := s.calls.Add(1)
	switch req.GetResponseSize() {
	case 1:
		var m map[string]int
		m["boom"]++ // a nil-map write: a real panic
	case 2:
		s.started <- struct{}{}
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	case 3:
		if n <= s.failures {
			return nil, status.Error(codes.Unavailable, "not yet")
		}
	}
	return &testpb.SimpleResponse{Username: "ok"}, nil
}

func start(t *testing.T, opts ServerOptions) (*Server, *testService, *grpc.ClientConn, context.CancelFunc, chan error) {
	t.Helper()
	return startOn(t, opts, nil)
}

// startOn is start with the server's listener wrapped by wrap, when set (to record what crosses
// the connection).
func startOn(t *testing.T, opts ServerOptions, wrap func(net.Listener) net.Listener) (*Server, *testService, *grpc.ClientConn, context.CancelFunc, chan error) {
	t.Helper()
	opts.Logger = quiet
	srv := NewServer(opts)
	svc := &testService{release: make(chan struct{}), started: make(chan struct{}, 1)}
	srv.Register(&testpb.TestService_ServiceDesc, svc)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var lis net.Listener = inner
	if wrap != nil {
		lis = wrap(inner)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	conn, err := Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = conn.Close()
	})
	return srv, svc, conn, cancel, done
}

func TestPanicBecomesInternal(t *testing.T) {
	_, _, conn, _, _ := start(t, ServerOptions{})
	c := testpb.NewTestServiceClient(conn)
	_, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{ResponseSize: 1})
	if status.Code(err) != codes.Internal {
		t.Fatalf("panicking handler: %v, want INTERNAL", err)
	}
	if _, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{}); err != nil {
		t.Fatalf("the server did not survive the panic: %v", err)
	}
}

func TestClientRetriesUnavailable(t *testing.T) {
	_, svc, conn, _, _ := start(t, ServerOptions{})
	svc.failures = 2
	res, err := testpb.NewTestServiceClient(conn).UnaryCall(context.Background(), &testpb.SimpleRequest{ResponseSize: 3})
	if err != nil || res.GetUsername() != "ok" {
		t.Fatalf("call after two UNAVAILABLE answers: %v", err)
	}
	if got := svc.calls.Load(); got != 3 {
		t.Errorf("server saw %d attempts, want 3", got)
	}
}

func TestMessageSizeLimit(t *testing.T) {
	_, _, conn, _, _ := start(t, ServerOptions{MaxMessageBytes: 1024})
	_, err := testpb.NewTestServiceClient(conn).UnaryCall(context.Background(), &testpb.SimpleRequest{Payload: &testpb.Payload{Body: make([]byte, 4096)}})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("oversized request: %v, want RESOURCE_EXHAUSTED", err)
	}
}

func healthOf(t *testing.T, conn *grpc.ClientConn, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	res, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatalf("health %q: %v", service, err)
	}
	return res.GetStatus()
}

func TestHealthFollowsDependencies(t *testing.T) {
	srv, _, conn, _, _ := start(t, ServerOptions{})
	name := testpb.TestService_ServiceDesc.ServiceName
	if got := healthOf(t, conn, name); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("registered service is %v", got)
	}
	var down atomic.Bool
	down.Store(true)
	srv.WatchDependency("redis", []string{name}, 20*time.Millisecond, func(context.Context) error {
		if down.Load() {
			return errors.New("connection refused")
		}
		return nil
	})
	if got := healthOf(t, conn, name); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("with its dependency down: %v", got)
	}
	// The process as a whole is not serving while one of its services is not.
	if got := healthOf(t, conn, ""); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("overall health with a service down: %v", got)
	}
	rec := httptest.NewRecorder()
	srv.ReadyHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), name) {
		t.Errorf("/readyz with a service down: %d %q", rec.Code, rec.Body.String())
	}
	rec = httptest.NewRecorder()
	srv.LiveHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/livez", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), name+" NOT_SERVING") {
		t.Errorf("/livez with a dependency down: %d %q (want 200: a restart would not help)", rec.Code, rec.Body.String())
	}
	down.Store(false)
	// testenv.WaitFor's loop; testenv imports this package.
	ctx, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	if !backoff.Until(ctx, healthPoll, func() bool {
		return healthOf(t, conn, name) == healthpb.HealthCheckResponse_SERVING && healthOf(t, conn, "") == healthpb.HealthCheckResponse_SERVING
	}) {
		t.Fatal("did not return to SERVING after the dependency came back")
	}
}

// healthPoll spaces the health checks of a test waiting for a status: often, well within the
// drain delay.
var healthPoll = backoff.Policy{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond, Jitter: 0.2}

func TestGracefulShutdownDrains(t *testing.T) {
	// The drain delay keeps the listener answering while health reports NOT_SERVING, as a load
	// balancer would see it; without it the GOAWAY of the graceful stop may come first.
	_, svc, conn, cancel, done := start(t, ServerOptions{ShutdownTimeout: 5 * time.Second, DrainDelay: 2 * time.Second})
	c := testpb.NewTestServiceClient(conn)
	result := make(chan error, 1)
	go func() {
		_, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{ResponseSize: 2})
		result <- err
	}()
	<-svc.started
	cancel() // SIGTERM
	ctx, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	if !backoff.Until(ctx, healthPoll, func() bool { return healthOf(t, conn, "") == healthpb.HealthCheckResponse_NOT_SERVING }) {
		t.Fatal("health did not go NOT_SERVING on shutdown")
	}
	close(svc.release)
	if err := <-result; err != nil {
		t.Fatalf("in-flight call was cut off: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

func TestShutdownDeadlineStopsHungCalls(t *testing.T) {
	_, svc, conn, cancel, done := start(t, ServerOptions{ShutdownTimeout: 100 * time.Millisecond})
	result := make(chan error, 1)
	go func() {
		_, err := testpb.NewTestServiceClient(conn).UnaryCall(context.Background(), &testpb.SimpleRequest{ResponseSize: 2})
		result <- err
	}()
	<-svc.started
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("shutdown did not stop a hung call")
	}
	if err := <-result; err == nil {
		t.Fatal("hung call succeeded")
	}
}

func TestViolations(t *testing.T) {
	var v Violations
	if v.Err() != nil {
		t.Fatal("empty violations are an error")
	}
	v.Required("user_id", "")
	v.MaxLen("title", "abcdef", 3)
	err := v.Err()
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("code %v", status.Code(err))
	}
	fv := FieldViolations(err)
	if len(fv) != 2 || fv[0].GetField() != "user_id" || fv[1].GetField() != "title" {
		t.Errorf("field violations = %v", fv)
	}
}

// TestRunTurnIsNotRetried: the retry policy leaves RunTurn out, so a failed turn never runs a
// second time behind the caller's back.
func TestRunTurnIsNotRetried(t *testing.T) {
	srv := NewServer(ServerOptions{Logger: quiet})
	var calls atomic.Int32
	srv.GRPC().RegisterService(&grpc.ServiceDesc{
		ServiceName: "hermes.orchestrator.v1.OrchestratorService",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{StreamName: "RunTurn", ServerStreams: true, Handler: func(any, grpc.ServerStream) error {
			calls.Add(1)
			return status.Error(codes.Unavailable, "session store down")
		}}},
	}, struct{}{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = srv.Serve(ctx, lis) }()
	conn, err := Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/hermes.orchestrator.v1.OrchestratorService/RunTurn")
	if err != nil {
		t.Fatal(err)
	}
	_ = st.CloseSend()
	if err := st.RecvMsg(new(testpb.Empty)); status.Code(err) != codes.Unavailable {
		t.Fatalf("RunTurn: %v, want UNAVAILABLE", err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("RunTurn reached the server %d times, want 1", n)
	}
}
