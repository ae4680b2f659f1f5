package security

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/app"
	"github.com/hermes-agent/hermes/internal/devcerts"
	"github.com/hermes-agent/hermes/internal/testenv"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	"github.com/hermes-agent/hermes/test/hermestest"
)

// certs is a development CA with the certificates of one test, written where the flags read
// them.
type certs struct {
	dir   string
	ca    *devcerts.CA
	rogue *devcerts.CA
}

func newCerts(t *testing.T) *certs {
	t.Helper()
	c := &certs{dir: t.TempDir()}
	var err error
	if c.ca, err = devcerts.NewCA("test CA", time.Hour); err != nil {
		t.Fatal(err)
	}
	if c.rogue, err = devcerts.NewCA("rogue CA", time.Hour); err != nil {
		t.Fatal(err)
	}
	hosts := []string{"localhost", "127.0.0.1"}
	if err := c.ca.WriteSet(c.dir, map[string][]string{"internal": hosts, "orchestrator": hosts, "client": hosts}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := c.rogue.WriteSet(filepath.Join(c.dir, "rogue"), map[string][]string{"client": hosts}, time.Hour); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *certs) path(parts ...string) string {
	return filepath.Join(append([]string{c.dir}, parts...)...)
}

// clientTLS dials with the CA of the test and, when given, a client certificate of dir.
func (c *certs) dial(t *testing.T, addr, certDir string) *grpc.ClientConn {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.ca.CertPEM)
	cfg := &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}
	if certDir != "" {
		kp, err := tls.LoadX509KeyPair(filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{kp}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// TestMutualTLS: the internal services accept only callers with a certificate of Hermes' CA
// (the service principal); the orchestrator, in another process, reaches them with its own
// certificate, and serves users with API keys over TLS on an optional-client-certificate
// listener.
func TestMutualTLS(t *testing.T) {
	c := newCerts(t)
	m := newModel(t)
	keys := writeFile(t, filepath.Join(c.dir, "keys.yaml"), authFile)

	internal := hermestest.Config(t)
	internal.Target = "session,tools,mcpgateway,memory"
	internal.AuthFile = keys
	internal.TLSCert, internal.TLSKey = c.path("internal", "tls.crt"), c.path("internal", "tls.key")
	internal.TLSClientCA, internal.TLSCA = c.path("ca.crt"), c.path("ca.crt")
	in := hermestest.StartApp(t, internal, quietLog())

	orch := hermestest.Config(t)
	orch.Target = "orchestrator"
	orch.ModelBaseURL = m.URL()
	orch.AuthFile = keys
	orch.TLSCert, orch.TLSKey = c.path("orchestrator", "tls.crt"), c.path("orchestrator", "tls.key")
	orch.TLSClientCA, orch.TLSClientAuth, orch.TLSCA = c.path("ca.crt"), "optional", c.path("ca.crt")
	orch.TLSServerName = "localhost"
	orch.SessionAddr, orch.ToolsAddr, orch.MemoryAddr = in.Addr(), in.Addr(), in.Addr()
	o := hermestest.StartApp(t, orch, quietLog())

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Without a certificate, or with one of another CA, the handshake fails: not even a key
	// gets a call through.
	for name, dir := range map[string]string{"no certificate": "", "rogue CA": c.path("rogue", "client")} {
		_, err := sessionv1.NewSessionServiceClient(c.dial(t, in.Addr(), dir)).ListSessions(metadataCtx(ctx, opsKey), &sessionv1.ListSessionsRequest{UserId: "alice"})
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%s: %v, want the connection refused (UNAVAILABLE)", name, err)
		}
	}
	// A certificate of the CA is the service principal: it may write a summary, which no user may.
	sessions := sessionv1.NewSessionServiceClient(c.dial(t, in.Addr(), c.path("client")))
	sess, err := sessions.CreateSession(ctx, &sessionv1.CreateSessionRequest{UserId: "alice"})
	if err != nil {
		t.Fatalf("with a certificate of the CA: %v", err)
	}
	// A user reaches the orchestrator over TLS with a key and no certificate; the orchestrator
	// reaches the session and tool services with its certificate.
	stream, err := orchestratorv1.NewOrchestratorServiceClient(c.dial(t, o.Addr(), "")).RunTurn(metadataCtx(ctx, aliceKey),
		&orchestratorv1.RunTurnRequest{SessionId: sess.GetSession().GetId(), Text: "hello over TLS"})
	if err != nil {
		t.Fatal(err)
	}
	var completed bool
	for {
		ev, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("turn over mutual TLS: %v", err)
		}
		completed = completed || ev.GetEvent().GetCompleted() != nil
		if f := ev.GetEvent().GetFailed(); f != nil {
			t.Fatalf("turn failed: %v", f)
		}
	}
	if !completed {
		t.Error("the turn did not complete")
	}
}

// TestCertificatesReload: a rotated certificate (cert-manager renews in place) is served on the
// next handshake, without a restart.
func TestCertificatesReload(t *testing.T) {
	c := newCerts(t)
	cfg := hermestest.Config(t)
	cfg.Target = "session"
	cfg.TLSCert, cfg.TLSKey = c.path("internal", "tls.crt"), c.path("internal", "tls.key")
	cfg.TLSClientCA = c.path("ca.crt")
	a := hermestest.StartApp(t, cfg, quietLog())
	served := func() string {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(c.ca.CertPEM)
		kp, err := tls.LoadX509KeyPair(c.path("client", "tls.crt"), c.path("client", "tls.key"))
		if err != nil {
			t.Fatal(err)
		}
		conn, err := tls.Dial("tcp", a.Addr(), &tls.Config{RootCAs: pool, ServerName: "localhost", Certificates: []tls.Certificate{kp}, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := served()
	crt, key, err := c.ca.Issue("internal", []string{"localhost", "127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// Written to new files and renamed over the old ones, as a Secret volume is updated.
	for name, data := range map[string][]byte{"tls.crt": crt, "tls.key": key} {
		tmp := c.path("internal", name+".new")
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			t.Fatal(err)
		}
		// The modification time must differ from the old file's even on a coarse clock.
		future := time.Now().Add(2 * time.Second)
		if err := os.Chtimes(tmp, future, future); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, c.path("internal", name)); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, 20*time.Second, "the rotated certificate to be served", func() bool { return served() != before })
}

// TestSecureByDefault: without keys or client certificates a listener stays on loopback; a
// non-loopback one needs keys, client certificates or --insecure-no-auth.
func TestSecureByDefault(t *testing.T) {
	base := hermestest.Config(t)
	base.Target = "session"
	base.ShutdownTimeout = time.Second
	tryStart := func(edit func(*app.Config)) error {
		cfg := base
		edit(&cfg)
		a, err := app.New(context.Background(), cfg, quietLog())
		if err == nil {
			_ = a.Stop()
		}
		return err
	}
	for name, tc := range map[string]struct {
		edit func(*app.Config)
		ok   bool
	}{
		"loopback, no keys":       {func(c *app.Config) { c.Listen = "127.0.0.1:0" }, true},
		"all interfaces, no keys": {func(c *app.Config) { c.Listen = "0.0.0.0:0" }, false},
		"empty host, no keys":     {func(c *app.Config) { c.Listen = ":0" }, false},
		"all interfaces, keys": {func(c *app.Config) {
			c.Listen = "0.0.0.0:0"
			c.AuthFile = writeFile(t, filepath.Join(t.TempDir(), "k.yaml"), authFile)
		}, true},
		"all interfaces, insecure": {func(c *app.Config) { c.Listen, c.InsecureNoAuth = "0.0.0.0:0", true }, true},
		"MCP endpoint on all interfaces, no keys": {func(c *app.Config) {
			c.Target, c.Listen, c.MCPGateway.MCPListen = "mcpgateway", "127.0.0.1:0", "0.0.0.0:0"
		}, false},
	} {
		err := tryStart(tc.edit)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want started=%v", name, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--auth-file") {
			t.Errorf("%s: the refusal %q does not say how to configure keys", name, err)
		}
	}
}
