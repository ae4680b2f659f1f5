// Package client is the Go client of Hermes: Dial an address with an API key and TLS settings,
// run a turn as an iterator of its events, and manage sessions and memories with typed calls.
//
// It is a thin layer over the generated gRPC stubs in proto/hermes/…/v1, which stay available
// as the Client's Sessions, Memory, Orchestrator and Tools fields for everything the helpers do
// not cover. Errors are gRPC status errors: Code(err), status.Code and status.FromError read
// their codes.
//
//	c, err := client.Dial(ctx, "hermes.example.com:7070", client.WithAPIKey(key))
//	if err != nil { … }
//	defer c.Close()
//	s, err := c.CreateSession(ctx, "support")
//	for ev, err := range c.Turn(ctx, s.GetId(), "Where is my order?") {
//		if err != nil { … }
//		fmt.Print(ev.GetDelta().GetText())
//	}
package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/hermes-agent/hermes/internal/rpc"
	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// Client is a connection to Hermes (all services in one process, or an address that routes to
// each of them). It is safe for concurrent use.
type Client struct {
	conn *grpc.ClientConn
	user string

	// The generated stubs, for the calls the helpers do not cover. Calls through them carry
	// the API key too.
	Sessions     sessionv1.SessionServiceClient
	Memory       memoryv1.MemoryServiceClient
	Orchestrator orchestratorv1.OrchestratorServiceClient
	Tools        toolsv1.ToolServiceClient
	Gateway      mcpgatewayv1.MCPGatewayServiceClient
}

// Option configures Dial.
type Option func(*options)

type options struct {
	apiKey     string
	user       string
	tlsConfig  *tls.Config
	caFile     string
	certFile   string
	keyFile    string
	serverName string
	plaintext  bool
	lazy       bool
	dial       []grpc.DialOption
}

// WithAPIKey sends key on every call as "authorization: Bearer <key>", the API key of a server
// started with --auth-file. The server then takes the user from the key.
func WithAPIKey(key string) Option { return func(o *options) { o.apiKey = key } }

// WithUser sets the user id the helpers send when a request names none. A server with API
// keys fills it from the key instead, and refuses another user's id for a user key.
func WithUser(id string) Option { return func(o *options) { o.user = id } }

// WithTLSConfig uses cfg for TLS; it overrides WithCAFile, WithClientCertificate and
// WithServerName.
func WithTLSConfig(cfg *tls.Config) Option { return func(o *options) { o.tlsConfig = cfg } }

// WithCAFile verifies the server's certificate against the PEM CA bundle in path instead of the
// system's roots.
func WithCAFile(path string) Option { return func(o *options) { o.caFile = path } }

// WithClientCertificate presents the PEM certificate and key for mutual TLS.
func WithClientCertificate(certFile, keyFile string) Option {
	return func(o *options) { o.certFile, o.keyFile = certFile, keyFile }
}

// WithServerName is the name expected in the server's certificate (default: the host of the
// address).
func WithServerName(name string) Option { return func(o *options) { o.serverName = name } }

// WithInsecure connects without TLS. Dial already does so for a loopback address when no TLS
// option is given; for any other address plaintext must be asked for, since an API key would
// cross the network readable.
func WithInsecure() Option { return func(o *options) { o.plaintext = true } }

// WithLazyConnect makes Dial return without connecting; the first call connects. By default
// Dial waits until the connection is up, so a wrong address or TLS setting fails there.
func WithLazyConnect() Option { return func(o *options) { o.lazy = true } }

// WithDialOptions adds gRPC dial options (interceptors, a resolver, keepalive …).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dial = append(o.dial, opts...) }
}

// Dial connects to the Hermes at addr (host:port, or a gRPC target such as
// dns:///hermes:7070). Without a TLS option it uses TLS with the system's roots, except for a
// loopback address, which it reaches in plaintext as `hermes serve` listens there by default.
// Unless WithLazyConnect is given it waits, within ctx, until the connection is up.
func Dial(ctx context.Context, addr string, opts ...Option) (*Client, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	creds, err := o.credentials(addr)
	if err != nil {
		return nil, err
	}
	dial := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if o.apiKey != "" {
		dial = append(dial, grpc.WithPerRPCCredentials(bearer{key: o.apiKey, secure: creds.Info().SecurityProtocol != "insecure"}))
	}
	conn, err := rpc.Dial(addr, append(dial, o.dial...)...)
	if err != nil {
		return nil, err
	}
	if !o.lazy {
		if err := waitReady(ctx, conn); err != nil {
			_ = conn.Close()
			if creds.Info().SecurityProtocol == "insecure" {
				return nil, fmt.Errorf("connecting to Hermes at %s in plaintext (if it serves TLS, give WithCAFile or WithTLSConfig): %w", addr, err)
			}
			return nil, fmt.Errorf("connecting to Hermes at %s: %w", addr, err)
		}
	}
	return &Client{
		conn: conn, user: o.user,
		Sessions:     sessionv1.NewSessionServiceClient(conn),
		Memory:       memoryv1.NewMemoryServiceClient(conn),
		Orchestrator: orchestratorv1.NewOrchestratorServiceClient(conn),
		Tools:        toolsv1.NewToolServiceClient(conn),
		Gateway:      mcpgatewayv1.NewMCPGatewayServiceClient(conn),
	}, nil
}

// Close closes the connection; calls in progress fail.
func (c *Client) Close() error { return c.conn.Close() }

// Conn is the underlying connection, for stubs of other services on the same address.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// User is the user id set with WithUser.
func (c *Client) User() string { return c.user }

func (o *options) credentials(addr string) (credentials.TransportCredentials, error) {
	wantsTLS := o.tlsConfig != nil || o.caFile != "" || o.certFile != "" || o.keyFile != "" || o.serverName != ""
	switch {
	case o.plaintext && wantsTLS:
		return nil, errors.New("client: WithInsecure and a TLS option contradict each other")
	case o.plaintext, !wantsTLS && isLoopback(addr):
		return insecure.NewCredentials(), nil
	case o.tlsConfig != nil:
		return credentials.NewTLS(o.tlsConfig.Clone()), nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.serverName}
	if o.caFile != "" {
		pem, err := os.ReadFile(o.caFile)
		if err != nil {
			return nil, fmt.Errorf("client: reading the CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client: %s holds no PEM certificate", o.caFile)
		}
		cfg.RootCAs = pool
	}
	if o.certFile != "" || o.keyFile != "" {
		cert, err := tls.LoadX509KeyPair(o.certFile, o.keyFile)
		if err != nil {
			return nil, fmt.Errorf("client: loading the client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return credentials.NewTLS(cfg), nil
}

// isLoopback reports whether addr is a loopback host:port (localhost, 127.0.0.0/8, ::1).
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// waitReady connects and waits until the connection is READY. A connection attempt that fails
// (refused, TLS handshake) ends the wait rather than retrying until ctx ends, with gRPC's
// reason, which a call made in that state reports.
func waitReady(ctx context.Context, conn *grpc.ClientConn) error {
	conn.Connect()
	for {
		s := conn.GetState()
		switch s {
		case connectivity.Ready:
			return nil
		case connectivity.Shutdown:
			return status.Error(codes.Canceled, "the connection was closed")
		case connectivity.TransientFailure:
			err := conn.Invoke(ctx, "/hermes.client.v1.Probe/Connect", &emptypb.Empty{}, &emptypb.Empty{})
			if Code(err) == codes.Unavailable || Code(err) == codes.DeadlineExceeded || Code(err) == codes.Canceled {
				return err
			}
			// The server answered the probe (unknown method, refused), so the connection is up.
			return nil
		}
		if !conn.WaitForStateChange(ctx, s) {
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}

// bearer sends the API key with every call.
type bearer struct {
	key    string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.key}, nil
}

// RequireTransportSecurity is false for plaintext connections Dial allowed (loopback, or asked
// for with WithInsecure); gRPC would otherwise refuse to send the key on them.
func (b bearer) RequireTransportSecurity() bool { return b.secure }

// Code is the gRPC code of err: codes.OK for nil, the status's code for errors from Hermes
// (also when wrapped), CANCELLED or DEADLINE_EXCEEDED for the context's errors, codes.Unknown
// otherwise.
func Code(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	switch {
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	}
	return codes.Unknown
}
