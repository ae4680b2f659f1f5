// Package rpc is the gRPC plumbing every Hermes service shares: server start-up with health,
// reflection, telemetry, recovery and request logging; graceful shutdown; client dialing with
// retries; and helpers that turn validation failures into gRPC status errors.
package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
)

// Default limits. Messages larger than MaxMessageBytes are refused by gRPC with
// RESOURCE_EXHAUSTED before they reach a handler.
const (
	DefaultMaxMessageBytes = 16 << 20
	DefaultShutdownTimeout = 20 * time.Second
)

// ServerOptions configure a Server.
type ServerOptions struct {
	// Logger receives request logs and lifecycle messages; nil means slog.Default().
	Logger *slog.Logger
	// MaxMessageBytes caps received and sent messages; 0 means DefaultMaxMessageBytes.
	MaxMessageBytes int
	// ShutdownTimeout is how long in-flight calls may drain before a hard stop; 0 means
	// DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// DrainDelay is how long the server keeps answering after health turns NOT_SERVING, so load
	// balancers stop sending new calls before the listener closes.
	DrainDelay time.Duration
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
		opts.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if opts.ShutdownTimeout == 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	s := &Server{health: health.NewServer(), log: opts.Logger, opts: opts, deps: map[string]*dependency{}}
	serverOpts := []grpc.ServerOption{
		grpc.StatsHandler(otelgrpc.NewServerHandler()),
		grpc.MaxRecvMsgSize(opts.MaxMessageBytes),
		grpc.MaxSendMsgSize(opts.MaxMessageBytes),
		grpc.ChainUnaryInterceptor(recoverUnary(opts.Logger), logUnary(opts.Logger)),
		grpc.ChainStreamInterceptor(recoverStream(opts.Logger), logStream(opts.Logger)),
		// Clients behind load balancers keep connections alive with pings; allow them.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// gRPC clients re-resolve DNS only when a connection ends; ageing connections out makes
		// callers spread onto new replicas after a scale-up. The grace outlasts a turn's deadline.
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: 5 * time.Minute, MaxConnectionAgeGrace: 3 * time.Minute}),
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
	s.mu.Lock()
	s.services = append(s.services, desc.ServiceName)
	s.mu.Unlock()
	s.refreshHealth()
}

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
