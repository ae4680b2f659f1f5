// Package httpapi serves Hermes' gRPC API as JSON over HTTP, for clients without gRPC. The routes
// are generated from the protos (grpc-gateway, proto/http.yaml); RunTurn streams its events as
// server-sent events; GET /openapi.json serves the OpenAPI document generated from the same
// protos.
//
// Every HTTP request becomes a gRPC call on a client connection to the process's own gRPC server,
// so it passes through the same interceptors (authentication, authorization, validation, logs,
// metrics) as a gRPC client's call: the request's Authorization header travels as the call's
// "authorization" metadata (X-Api-Key as "x-api-key"), and no other header is forwarded as
// metadata except the gateway's own x-forwarded-for and x-forwarded-host.
package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/hermes-agent/hermes/internal/auth"
	"github.com/hermes-agent/hermes/internal/browserguard"
	hermesproto "github.com/hermes-agent/hermes/proto"
	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// Limits of the HTTP listener; each is the default of the Options field of the same name.
const (
	// defaultMaxBodyBytes caps a request body (JSON is larger than the protobuf it carries; the
	// gRPC limit of a message is 16 MiB). A larger body is refused with 413.
	defaultMaxBodyBytes = 4 << 20
	// defaultMaxHeaderBytes caps a request's headers.
	defaultMaxHeaderBytes = 64 << 10
	// defaultReadHeaderTimeout is how long a client may take to send the headers.
	defaultReadHeaderTimeout = 10 * time.Second
	// defaultReadBodyTimeout is how long a client may take to send the body.
	defaultReadBodyTimeout = 30 * time.Second
	// defaultCallTimeout is the deadline of a call other than RunTurn when the request sets no
	// shorter one in a Grpc-Timeout header. A turn has its own deadline (TurnOptions.timeout,
	// 120 s by default).
	defaultCallTimeout = 2 * time.Minute
	// defaultWriteTimeout is how long one write to a client may block, so a client that stops
	// reading does not hold a stream forever.
	defaultWriteTimeout = 30 * time.Second
	// defaultIdleTimeout closes keep-alive connections idle this long.
	defaultIdleTimeout = 2 * time.Minute
	// defaultHeartbeat is the interval of the comment lines that keep an idle event stream
	// open through proxies while a tool runs.
	defaultHeartbeat = 15 * time.Second
)

// runTurnPattern is RunTurn's route in proto/http.yaml; this package serves it as an event
// stream instead of the gateway's newline-delimited JSON.
const runTurnPattern = "/v1/sessions/{session_id}/turns"

// Options configure a Server. Zero values mean the defaults above.
type Options struct {
	// Services are the gRPC services to expose, by full name; empty exposes all five. A
	// process exposes the services it serves, so a route of another answers 404.
	Services []string
	// Omit are full method names ("/hermes.memory.v1.MemoryService/RunMaintenance") of exposed
	// services that the process does not serve (the edge's, internal/edge): their routes answer
	// 404 and the OpenAPI document leaves them out.
	Omit []string
	// Logger receives what goes wrong in the HTTP layer itself (calls are logged by the gRPC
	// server); nil discards.
	Logger *slog.Logger
	// Guard keeps web pages from using the API through a browser (Host, Origin, JSON writes,
	// CORS); it wraps every route. Nil is the default guard: loopback names and IP addresses,
	// same-origin pages only, no CORS.
	Guard *browserguard.Guard
	// Routes are further handlers served on the listener, by ServeMux pattern (the web console
	// at /ui/), behind the same body limit as the API's routes.
	Routes map[string]http.Handler

	MaxBodyBytes      int64
	MaxHeaderBytes    int
	ReadHeaderTimeout time.Duration
	ReadBodyTimeout   time.Duration
	CallTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	ShutdownTimeout   time.Duration
	Heartbeat         time.Duration
}

func (o *Options) defaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if len(o.Services) == 0 {
		for _, g := range gateways() {
			o.Services = append(o.Services, g.service)
		}
	}
	set := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	set(&o.ReadHeaderTimeout, defaultReadHeaderTimeout)
	set(&o.ReadBodyTimeout, defaultReadBodyTimeout)
	set(&o.CallTimeout, defaultCallTimeout)
	set(&o.WriteTimeout, defaultWriteTimeout)
	set(&o.IdleTimeout, defaultIdleTimeout)
	set(&o.ShutdownTimeout, 20*time.Second)
	set(&o.Heartbeat, defaultHeartbeat)
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = defaultMaxBodyBytes
	}
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = defaultMaxHeaderBytes
	}
	if o.Guard == nil {
		// The zero configuration is always valid.
		o.Guard, _ = browserguard.New(browserguard.Config{Logger: o.Logger})
	}
}

// gateway registers one service's generated routes with a client on the connection. Only the
// HandlerClient form is used: the HandlerServer form would call the implementation directly,
// past the interceptors.
type gateway struct {
	service  string
	register func(context.Context, *runtime.ServeMux, grpc.ClientConnInterface) error
}

func gateways() []gateway {
	return []gateway{
		{orchestratorv1.OrchestratorService_ServiceDesc.ServiceName, func(ctx context.Context, mux *runtime.ServeMux, cc grpc.ClientConnInterface) error {
			return orchestratorv1.RegisterOrchestratorServiceHandlerClient(ctx, mux, orchestratorv1.NewOrchestratorServiceClient(cc))
		}},
		{sessionv1.SessionService_ServiceDesc.ServiceName, func(ctx context.Context, mux *runtime.ServeMux, cc grpc.ClientConnInterface) error {
			return sessionv1.RegisterSessionServiceHandlerClient(ctx, mux, sessionv1.NewSessionServiceClient(cc))
		}},
		{memoryv1.MemoryService_ServiceDesc.ServiceName, func(ctx context.Context, mux *runtime.ServeMux, cc grpc.ClientConnInterface) error {
			return memoryv1.RegisterMemoryServiceHandlerClient(ctx, mux, memoryv1.NewMemoryServiceClient(cc))
		}},
		{toolsv1.ToolService_ServiceDesc.ServiceName, func(ctx context.Context, mux *runtime.ServeMux, cc grpc.ClientConnInterface) error {
			return toolsv1.RegisterToolServiceHandlerClient(ctx, mux, toolsv1.NewToolServiceClient(cc))
		}},
		{mcpgatewayv1.MCPGatewayService_ServiceDesc.ServiceName, func(ctx context.Context, mux *runtime.ServeMux, cc grpc.ClientConnInterface) error {
			return mcpgatewayv1.RegisterMCPGatewayServiceHandlerClient(ctx, mux, mcpgatewayv1.NewMCPGatewayServiceClient(cc))
		}},
	}
}

// Server is the HTTP/JSON front of a gRPC connection.
type Server struct {
	opts      Options
	gw        *runtime.ServeMux
	marshaler runtime.Marshaler
	// orch is nil when the orchestrator is not exposed.
	orch    orchestratorv1.OrchestratorServiceClient
	handler http.Handler
	// openAPI is the OpenAPI document of what this server routes.
	openAPI []byte
}

// New builds the HTTP API over conn, a connection whose calls pass through the gRPC server's
// interceptors.
func New(conn grpc.ClientConnInterface, opts Options) (*Server, error) {
	opts.defaults()
	s := &Server{
		opts: opts,
		// Proto field names, as in the .proto files, grpcurl and the OpenAPI document; every field
		// is present in an answer, so a client need not know proto3's defaults. Unknown fields in
		// a request are an error, so a misspelt field is not silently ignored.
		marshaler: &runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
			UnmarshalOptions: protojson.UnmarshalOptions{},
		},
	}
	s.gw = runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, s.marshaler),
		// Only the credentials become metadata: Authorization (the gateway forwards it by itself)
		// and X-Api-Key. Every other header stays out of the call, so an HTTP client cannot set
		// metadata that a gRPC client could not.
		runtime.WithIncomingHeaderMatcher(func(h string) (string, bool) {
			if strings.EqualFold(h, "X-Api-Key") {
				return "x-api-key", true
			}
			return "", false
		}),
		runtime.WithOutgoingHeaderMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithErrorHandler(httpErrorHandler),
	)
	doc, err := servedOpenAPI(hermesproto.OpenAPI, opts.Services, opts.Omit)
	if err != nil {
		return nil, err
	}
	s.openAPI = []byte(doc)
	if len(opts.Omit) > 0 {
		omit := map[string]bool{}
		for _, m := range opts.Omit {
			omit[m] = true
		}
		conn = omitConn{ClientConnInterface: conn, omit: omit}
	}
	ctx := context.Background()
	for _, g := range gateways() {
		if !slices.Contains(opts.Services, g.service) {
			continue
		}
		if err := g.register(ctx, s.gw, conn); err != nil {
			return nil, fmt.Errorf("http api for %s: %w", g.service, err)
		}
		if g.service == orchestratorv1.OrchestratorService_ServiceDesc.ServiceName {
			s.orch = orchestratorv1.NewOrchestratorServiceClient(conn)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /openapi.json", s.serveOpenAPI)
	if s.orch != nil {
		mux.HandleFunc("POST "+runTurnPattern, s.runTurn)
	}
	for pattern, h := range opts.Routes {
		mux.Handle(pattern, h)
	}
	mux.Handle("/", s.limitCall(s.gw))
	s.handler = opts.Guard.Wrap(s.limitBody(otelhttp.NewHandler(mux, "hermes.http")))
	return s, nil
}

// Handler is the API's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve serves lis until ctx ends, then shuts down: new requests are refused, running ones
// (event streams included) get ShutdownTimeout to finish before their connections are closed.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.opts.ReadHeaderTimeout,
		MaxHeaderBytes:    s.opts.MaxHeaderBytes,
		IdleTimeout:       s.opts.IdleTimeout,
		// No ReadTimeout or WriteTimeout: they would cut event streams. Each request gets its own
		// read and write deadlines instead (limitBody, limitCall, the event stream's writes).
		ErrorLog: slog.NewLogLogger(s.opts.Logger.Handler(), slog.LevelWarn),
		BaseContext: func(net.Listener) context.Context {
			return context.WithoutCancel(ctx)
		},
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(lis) }()
	select {
	case err := <-errc:
		return fmt.Errorf("http serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.ShutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		s.opts.Logger.Warn("http api: shutdown deadline passed; closing the remaining connections", "error", err)
		_ = hs.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http serve: %w", err)
	}
	return nil
}

// limitBody refuses bodies over MaxBodyBytes (413 when the length is declared, an error while
// reading otherwise) and gives the client ReadBodyTimeout to send the body.
func (s *Server) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > s.opts.MaxBodyBytes {
			msg := fmt.Sprintf("request body of %d bytes is over the limit of %d bytes", r.ContentLength, s.opts.MaxBodyBytes)
			s.httpError(w, r, &runtime.HTTPStatusError{HTTPStatus: http.StatusRequestEntityTooLarge, Err: status.Error(codes.ResourceExhausted, msg)})
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.opts.ReadBodyTimeout))
		next.ServeHTTP(w, r)
	})
}

// limitCall gives a unary call its deadline, and the connection read and write deadlines that
// outlast it (a read deadline that passes during the call would cancel it).
func (s *Server) limitCall(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), s.opts.CallTimeout)
		defer cancel()
		rc := http.NewResponseController(w)
		end := time.Now().Add(s.opts.CallTimeout + s.opts.WriteTimeout)
		_ = rc.SetReadDeadline(end)
		_ = rc.SetWriteDeadline(end)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// serveOpenAPI serves the OpenAPI document of the routes this server serves.
func (s *Server) serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(s.openAPI)
}

// httpErrorHandler is the gateway's error handler, in HTTP's words: a call without a key is
// told to send the Authorization header (not gRPC metadata), with the WWW-Authenticate
// challenge that a 401 carries.
func httpErrorHandler(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	err = auth.ForHTTP(err)
	if status.Code(err) == codes.Unauthenticated {
		w.Header().Set("WWW-Authenticate", `Bearer realm="hermes"`)
	}
	setRetryAfter(w, err)
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
}

// httpError answers err in the gateway's error format: a google.rpc.Status as JSON, with the
// HTTP status of its gRPC code.
func (s *Server) httpError(w http.ResponseWriter, r *http.Request, err error) {
	runtime.HTTPError(r.Context(), s.gw, s.marshaler, w, r, err)
}
