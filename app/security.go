package app

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/hermes-agent/hermes/internal/auth"
	"github.com/hermes-agent/hermes/internal/config"
	"github.com/hermes-agent/hermes/internal/egress"
	"github.com/hermes-agent/hermes/internal/secretenv"
)

// security is the access configuration of a process: the API keys, the authenticator every
// listener uses, the listener's TLS, and the credentials of calls to other processes.
type security struct {
	cfg         config.Common
	log         *slog.Logger
	keys        *auth.KeyFile // nil without --auth-file
	authn       *auth.Authenticator
	serverCreds credentials.TransportCredentials
	dialOpts    []grpc.DialOption
	// egress decides the outbound connections made for tools and MCP servers; secrets the
	// environment variables their specs may read.
	egress  *egress.Policy
	secrets *secretenv.Reader
}

func newSecurity(cfg config.Common, log *slog.Logger) (*security, error) {
	s := &security{cfg: cfg, log: log, secrets: secretenv.New(cfg.SecretEnvAllow, nil)}
	var err error
	if s.egress, err = egress.New(cfg.EgressAllow); err != nil {
		return nil, err
	}
	if cfg.AuthFile != "" {
		keys, err := auth.LoadKeyFile(cfg.AuthFile, log)
		if err != nil {
			return nil, err
		}
		s.keys = keys
		log.Info("API keys on: every call is authenticated", "auth_file", cfg.AuthFile, "keys", keys.Len())
	}
	s.authn = auth.New(s.keys, log)
	tlsCfg := cfg.TLS()
	if err := tlsCfg.Validate(); err != nil {
		return nil, err
	}
	if s.serverCreds, err = tlsCfg.ServerCredentials(log); err != nil {
		return nil, err
	}
	clientCreds, err := tlsCfg.ClientCredentials(log)
	if err != nil {
		return nil, err
	}
	if clientCreds != nil {
		s.dialOpts = append(s.dialOpts, grpc.WithTransportCredentials(clientCreds))
	}
	if cfg.ServiceKeyFile != "" {
		data, err := os.ReadFile(cfg.ServiceKeyFile)
		if err != nil {
			return nil, fmt.Errorf("service key: %w", err)
		}
		key := strings.TrimSpace(string(data))
		if len(key) < auth.MinKeyLength {
			return nil, fmt.Errorf("service key in %s: shorter than %d characters", cfg.ServiceKeyFile, auth.MinKeyLength)
		}
		s.dialOpts = append(s.dialOpts, grpc.WithPerRPCCredentials(bearerCreds{key: key}))
	}
	if cfg.InsecureNoAuth {
		log.Warn("INSECURE: --insecure-no-auth lets anyone who reaches a listener act as any user and operator: read every conversation and memory, register tools and MCP servers; never use it on a shared network")
	}
	return s, nil
}

// grpcProtected reports whether the gRPC listener authenticates its callers: API keys, or
// client certificates that every caller must present.
func (s *security) grpcProtected() bool {
	return s.keys != nil || s.cfg.TLS().RequiresClientCert()
}

// checkListen refuses a listener on a non-loopback address that would serve unauthenticated
// callers, unless the operator accepted it with --insecure-no-auth.
func (s *security) checkListen(flag, addr string, protected bool) error {
	if addr == "" || protected || isLoopback(addr) {
		return nil
	}
	if s.cfg.InsecureNoAuth {
		s.log.Warn("INSECURE: serving without authentication on a non-loopback address", "flag", "--"+flag, "addr", addr)
		return nil
	}
	return fmt.Errorf("refusing to listen on %s (--%s) without authentication: anyone who reaches it would act as every user and operator. "+
		"Configure API keys (--auth-file) or client certificates (--tls-client-ca), listen on loopback (127.0.0.1), "+
		"or accept the risk with --insecure-no-auth", addr, flag)
}

// isLoopback reports whether a listen address is reachable only from this host.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// httpAuth protects an HTTP handler of the process (the profiler) with the API keys: the bearer
// key's principal must be allowed to call method (the gRPC method whose power the handler
// gives). Without keys every caller is let through (loopback or --insecure-no-auth, see
// checkListen).
func (s *security) httpAuth(method string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := s.authn.AuthenticateHTTP(r)
		if err == nil {
			err = s.authn.Authorize(p, method, nil)
		}
		if err != nil {
			auth.WriteHTTPError(w, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(auth.NewContext(r.Context(), p)))
	})
}

// bearerCreds sends the service key on calls to other Hermes services.
type bearerCreds struct{ key string }

func (b bearerCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.key}, nil
}

// RequireTransportSecurity is false so a key also works on a plaintext network protected by
// other means (a service mesh); the README recommends mutual TLS instead.
func (b bearerCreds) RequireTransportSecurity() bool { return false }
