// Package rpc is the gRPC plumbing every Hermes service shares: server start-up with health,
// reflection, telemetry, recovery and request logging; graceful shutdown; client dialing with
// retries; and helpers that turn validation failures into gRPC status errors.
package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fullstorydev/grpchan/inprocgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/stats"

	"github.com/hermes-agent/hermes/internal/auth"
)

// Default limits. Messages larger than MaxMessageBytes are refused by gRPC with
// RESOURCE_EXHAUSTED before they reach a handler.
const (
	defaultMaxMessageBytes = 16 << 20
	defaultShutdownTimeout = 20 * time.Second
)

// streamWorkers is how many handler workers a server keeps per GOMAXPROCS.
const streamWorkers = 4

// The fixed HTTP/2 flow-control windows of Hermes' servers and clients: how much a peer may send
// on one stream, and on one connection, before the receiver acknowledges reading it. A window
// bounds throughput to window/RTT per stream (1 MiB per 0.5 ms is 2 GiB/s) and what a receiver
// buffers for a stream its handler has not read yet.
const (
	streamWindowBytes = 1 << 20
	connWindowBytes   = 4 << 20
)

// ServerOptions configure a Server.
type ServerOptions struct {
	// Logger receives request logs and lifecycle messages; nil means slog.Default().
	Logger *slog.Logger
	// MaxMessageBytes caps received and sent messages; 0 means defaultMaxMessageBytes (16 MiB).
	MaxMessageBytes int
	// ShutdownTimeout is how long in-flight calls may drain before a hard stop; 0 means
	// defaultShutdownTimeout (20 s).
	ShutdownTimeout time.Duration
	// DrainDelay is how long the server keeps answering after health turns NOT_SERVING, so load
	// balancers stop sending new calls before the listener closes.
	DrainDelay time.Duration
	// Auth authenticates and authorizes every call (network and in-process) against the one
	// policy table; nil serves without it (tests of the plumbing itself).
	Auth *auth.Authenticator
	// Unary and Stream run innermost, after authentication (the caller's principal is in the
	// context) and inside classification (their errors are errclass errors), on the listener and
	// the in-process channels alike: per-user quotas (internal/quota).
	Unary  []grpc.UnaryServerInterceptor
	Stream []grpc.StreamServerInterceptor
	// Creds are the listener's transport credentials (TLS, mutual TLS); nil serves plaintext.
	Creds credentials.TransportCredentials
	// ExtraOptions are appended to the server's options.
	ExtraOptions []grpc.ServerOption
}

// Server is a gRPC server with health, reflection and the shared interceptors. Register
// services with Register, then call Serve.
type Server struct {
	grpc   *grpc.Server
	health *health.Server
	log    *slog.Logger
	opts   ServerOptions
	// inproc carries calls between the services of this process without the network: the
	// callers are Hermes' own services (the service principal). public carries calls made in
	// this process for an outside caller (the HTTP API), authenticated from their metadata.
	// Both run the same interceptors as the listener.
	inproc *channel
	public *channel

	// mu guards the fields below and each dependency's healthy.
	mu       sync.Mutex
	services []string
	deps     map[string]*dependency
	stopping bool
}

// NewServer builds a Server. It registers grpc.health.v1.Health and server reflection.
func NewServer(opts ServerOptions) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxMessageBytes == 0 {
		opts.MaxMessageBytes = defaultMaxMessageBytes
	}
	if opts.ShutdownTimeout == 0 {
		opts.ShutdownTimeout = defaultShutdownTimeout
	}
	s := &Server{health: health.NewServer(), log: opts.Logger, opts: opts, deps: map[string]*dependency{}}
	codec := newUTF8Codec()
	unary := []grpc.UnaryServerInterceptor{recoverUnary(opts.Logger), logUnary(opts.Logger), codec.checkUTF8Unary()}
	stream := []grpc.StreamServerInterceptor{recoverStream(opts.Logger), logStream(opts.Logger), codec.checkUTF8Stream()}
	if opts.Auth != nil {
		unary = append(unary, opts.Auth.UnaryInterceptor())
		stream = append(stream, opts.Auth.StreamInterceptor())
	}
	// Innermost: every handler's error leaves as a status of the one taxonomy.
	unary = append(unary, classifyUnary(opts.Logger))
	stream = append(stream, classifyStream(opts.Logger))
	unary = append(unary, opts.Unary...)
	stream = append(stream, opts.Stream...)
	trustU, trustS := auth.TrustInProcess()
	s.inproc = newChannel(append([]grpc.UnaryServerInterceptor{trustU}, unary...), append([]grpc.StreamServerInterceptor{trustS}, stream...))
	s.public = newChannel(unary, stream)
	serverOpts := []grpc.ServerOption{
		grpc.StatsHandler(otelgrpc.NewServerHandler()),
		grpc.ForceServerCodecV2(codec),
		grpc.MaxRecvMsgSize(opts.MaxMessageBytes),
		grpc.MaxSendMsgSize(opts.MaxMessageBytes),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
		// Handlers run on long-lived workers whose stacks have already grown; a goroutine per
		// call grew its stack by copying on every call (5–9% of a service's CPU). More calls at
		// once than workers get a goroutine each, as without workers.
		grpc.NumStreamWorkers(uint32(streamWorkers * runtime.GOMAXPROCS(0))),
		// Fixed flow-control windows: with gRPC's dynamic windows every request that arrives
		// after a quiet moment makes the server send a BDP ping (and a window update) that the
		// client must answer — two writes and two reads more per call, about a third of a
		// small call's socket work. The windows are as large as Hermes' calls need.
		grpc.StaticStreamWindowSize(streamWindowBytes),
		grpc.StaticConnWindowSize(connWindowBytes),
		// Clients behind load balancers keep connections alive with pings; allow them.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// gRPC clients re-resolve DNS only when a connection ends; ageing connections out makes
		// callers spread onto new replicas after a scale-up. The grace outlasts a turn's deadline.
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: 5 * time.Minute, MaxConnectionAgeGrace: 3 * time.Minute}),
	}
	if opts.Creds != nil {
		serverOpts = append(serverOpts, grpc.Creds(opts.Creds))
	}
	serverOpts = append(serverOpts, opts.ExtraOptions...)
	s.grpc = grpc.NewServer(serverOpts...)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	// The overall status ("") is SERVING from the start; per-service status follows Register and
	// the service's dependencies.
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	return s
}

// Register adds a service implementation and marks its name SERVING in the health service.
func (s *Server) Register(desc *grpc.ServiceDesc, impl any) {
	s.grpc.RegisterService(desc, impl)
	s.inproc.RegisterService(desc, impl)
	s.public.RegisterService(desc, impl)
	s.mu.Lock()
	s.services = append(s.services, desc.ServiceName)
	s.mu.Unlock()
	s.refreshHealth()
}

// InProcess is a connection to this server's services for Hermes' own services in the same
// process: no network, no serialization (messages are cloned), the same interceptors, and the
// caller is the service principal.
func (s *Server) InProcess() grpc.ClientConnInterface { return s.inproc }

// InProcessPublic is a connection to this server's services for calls made on behalf of an
// outside caller (the HTTP API): the credentials in the call's metadata are authenticated as on
// the network listener.
func (s *Server) InProcessPublic() grpc.ClientConnInterface { return s.public }

// GRPC returns the underlying server, for tests and for registering extra services.
func (s *Server) GRPC() *grpc.Server { return s.grpc }

// Services returns the names of the registered services.
func (s *Server) Services() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.services...)
}

// Serve accepts connections on lis until ctx is cancelled, then shuts down gracefully: health
// goes NOT_SERVING, after DrainDelay the server stops accepting and in-flight calls drain, and
// after ShutdownTimeout the remaining calls are cut off. It returns nil after a shutdown caused
// by ctx.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- s.grpc.Serve(lis) }()
	select {
	case err := <-errc:
		return fmt.Errorf("grpc serve: %w", err)
	case <-ctx.Done():
	}
	s.Shutdown()
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("grpc serve: %w", err)
	}
	return nil
}

// Shutdown drains and stops the server as Serve does on cancellation.
func (s *Server) Shutdown() {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return
	}
	s.stopping = true
	for _, d := range s.deps {
		d.stop()
	}
	s.mu.Unlock()
	s.log.Info("shutting down: health NOT_SERVING, draining in-flight calls", "timeout", s.opts.ShutdownTimeout)
	s.health.Shutdown()
	if s.opts.DrainDelay > 0 {
		time.Sleep(s.opts.DrainDelay)
	}
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
		s.log.Info("drained")
	case <-time.After(s.opts.ShutdownTimeout):
		s.log.Warn("drain deadline passed; stopping remaining calls")
		s.grpc.Stop()
		<-done
	}
}

// channel is an in-process channel with the interceptor chains and the tracing of the network
// path, so one turn stays one trace across the services of a process. Services may register
// while calls run (a module's background work starts before later modules register), which
// grpchan's handler map does not allow: each registration builds a new channel with every
// service so far and swaps it in, and a call uses the channel current when it starts.
type channel struct {
	unary  grpc.UnaryServerInterceptor
	stream grpc.StreamServerInterceptor
	cur    atomic.Pointer[inprocgrpc.Channel]
	// methods are the unary methods of cur's services, which run on the caller's goroutine
	// (inproc.go); swapped with cur.
	methods     atomic.Pointer[map[string]unaryMethod]
	clientStats stats.Handler
	serverStats stats.Handler

	// mu serializes registrations; it guards services.
	mu       sync.Mutex
	services []registeredService
}

type registeredService struct {
	desc *grpc.ServiceDesc
	impl any
}

func newChannel(unary []grpc.UnaryServerInterceptor, stream []grpc.StreamServerInterceptor) *channel {
	c := &channel{unary: chainUnary(unary), stream: chainStream(stream),
		clientStats: otelgrpc.NewClientHandler(), serverStats: otelgrpc.NewServerHandler()}
	c.cur.Store(c.build())
	return c
}

// build is a channel serving the registered services; the caller holds mu (or owns c).
func (c *channel) build() *inprocgrpc.Channel {
	ch := new(inprocgrpc.Channel).
		WithServerUnaryInterceptor(c.unary).
		WithServerStreamInterceptor(c.stream).
		WithClientStatsHandler(c.clientStats).
		WithServerStatsHandler(c.serverStats)
	for _, r := range c.services {
		ch.RegisterService(r.desc, r.impl)
	}
	m := unaryMethods(c.services)
	c.methods.Store(&m)
	return ch
}

// RegisterService adds a service for the calls that start from now on.
func (c *channel) RegisterService(desc *grpc.ServiceDesc, impl any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.services = append(c.services, registeredService{desc, impl})
	c.cur.Store(c.build())
}

// Invoke implements grpc.ClientConnInterface.
func (c *channel) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	method = fullMethod(method)
	if m, ok := (*c.methods.Load())[method]; ok && directOptions(opts) {
		return c.invokeUnary(ctx, method, m, args, reply)
	}
	return c.cur.Load().Invoke(ctx, method, args, reply, opts...)
}

// NewStream implements grpc.ClientConnInterface.
func (c *channel) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := c.cur.Load().NewStream(ctx, desc, method, opts...)
	if err != nil || desc.ClientStreams {
		return cs, err
	}
	return oneRequestStream{cs}, nil
}

// oneRequestStream is the client side of a call with one request (server-streaming), whose
// generated code returns SendMsg's error and never reads the call's status when it fails.
// grpchan's SendMsg answers io.EOF, or the context's error, when the handler has already ended
// (an interceptor refused the call before reading the request; a Go select picks between the
// buffered send and the ended stream at random), so a refusal reached the caller as a bare
// "EOF" (code Unknown, HTTP 500) about half the time. grpc-go's SendMsg returns nil for such
// calls for this reason, and the status comes from RecvMsg; this does the same.
type oneRequestStream struct{ grpc.ClientStream }

func (s oneRequestStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}

// chainUnary runs interceptors in order, as grpc.ChainUnaryInterceptor does on a server.
func chainUnary(in []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		next := handler
		for i := len(in) - 1; i >= 0; i-- {
			ic, h := in[i], next
			next = func(ctx context.Context, req any) (any, error) { return ic(ctx, req, info, h) }
		}
		return next(ctx, req)
	}
}

// chainStream runs interceptors in order, as grpc.ChainStreamInterceptor does on a server.
func chainStream(in []grpc.StreamServerInterceptor) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		next := handler
		for i := len(in) - 1; i >= 0; i-- {
			ic, h := in[i], next
			next = func(srv any, ss grpc.ServerStream) error { return ic(srv, ss, info, h) }
		}
		return next(srv, ss)
	}
}
