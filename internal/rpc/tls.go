package rpc

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
)

// TLSConfig is the transport security of a process: the certificate it serves (and presents
// as client certificate to the Hermes services it calls), the CA that signs the client
// certificates it accepts (mutual TLS between Hermes' pods), and the CA it verifies the services
// it calls against. Every file is re-read when it changes (cert-manager rotates them in place).
type TLSConfig struct {
	// CertFile and KeyFile are the PEM certificate chain and key.
	CertFile, KeyFile string
	// ClientCAFile verifies client certificates; a caller with a verified certificate is the
	// service principal (internal/auth).
	ClientCAFile string
	// ClientAuth is "require" (the default with ClientCAFile: only callers with a certificate
	// connect) or "optional" (a certificate is verified when given; the public listener of the
	// orchestrator, where users come with API keys).
	ClientAuth string
	// CAFile verifies the servers this process calls; setting it turns TLS on for them.
	CAFile string
	// ServerName, when set, is the name expected in the servers' certificates instead of the
	// host of the address dialled.
	ServerName string
}

// reloadCheckEvery bounds how often the files' modification times are looked at.
const reloadCheckEvery = time.Second

// Server reports whether the process serves TLS.
func (c TLSConfig) Server() bool { return c.CertFile != "" || c.KeyFile != "" }

// RequiresClientCert reports whether only callers with a verified certificate can connect.
func (c TLSConfig) RequiresClientCert() bool {
	return c.ClientCAFile != "" && c.ClientAuth != "optional"
}

// Validate reports settings that do not fit together.
func (c TLSConfig) Validate() error {
	switch {
	case (c.CertFile == "") != (c.KeyFile == ""):
		return errors.New("tls: --tls-cert and --tls-key go together")
	case c.ClientCAFile != "" && c.CertFile == "":
		return errors.New("tls: --tls-client-ca needs --tls-cert and --tls-key (client certificates are checked in a TLS handshake)")
	case c.ClientAuth != "" && c.ClientAuth != "require" && c.ClientAuth != "optional":
		return fmt.Errorf("tls: --tls-client-auth %q: want require or optional", c.ClientAuth)
	}
	return nil
}

// ServerCredentials returns the listener's transport credentials, or nil without a certificate.
func (c TLSConfig) ServerCredentials(log *slog.Logger) (credentials.TransportCredentials, error) {
	if !c.Server() {
		return nil, nil
	}
	cfg, err := c.ServerTLS(log)
	if err != nil {
		return nil, err
	}
	return credentials.NewTLS(cfg), nil
}

// ServerTLS returns the tls.Config of a listener (gRPC, or an HTTP listener of the process).
func (c TLSConfig) ServerTLS(log *slog.Logger) (*tls.Config, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	cert := newCertFile(c.CertFile, c.KeyFile, log)
	if _, err := cert.get(); err != nil {
		return nil, err
	}
	var clientCA *poolFile
	mode := tls.NoClientCert
	if c.ClientCAFile != "" {
		clientCA = newPoolFile(c.ClientCAFile, log)
		if _, err := clientCA.get(); err != nil {
			return nil, err
		}
		mode = tls.RequireAndVerifyClientCert
		if c.ClientAuth == "optional" {
			mode = tls.VerifyClientCertIfGiven
		}
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// A config per handshake picks up rotated files.
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			kp, err := cert.get()
			if err != nil {
				return nil, err
			}
			out := &tls.Config{
				MinVersion:   tls.VersionTLS12,
				Certificates: []tls.Certificate{*kp},
				ClientAuth:   mode,
				NextProtos:   []string{"h2", "http/1.1"},
			}
			if clientCA != nil {
				if out.ClientCAs, err = clientCA.get(); err != nil {
					return nil, err
				}
			}
			return out, nil
		},
	}, nil
}

// ClientCredentials returns the transport credentials for calls to other Hermes services, or
// nil when no CA is configured (plaintext, for loopback and tests).
func (c TLSConfig) ClientCredentials(log *slog.Logger) (credentials.TransportCredentials, error) {
	if c.CAFile == "" {
		return nil, nil
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	roots := newPoolFile(c.CAFile, log)
	if _, err := roots.get(); err != nil {
		return nil, err
	}
	var cert *certFile
	if c.CertFile != "" {
		cert = newCertFile(c.CertFile, c.KeyFile, log)
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: c.ServerName,
		// The standard verification cannot re-read the CA file, so it is done in
		// VerifyConnection against the current pool, with the same checks (chain and name).
		InsecureSkipVerify: true, // #nosec G402 -- the chain and name are verified in VerifyConnection below, against the reloaded CA
		VerifyConnection: func(cs tls.ConnectionState) error {
			pool, err := roots.get()
			if err != nil {
				return err
			}
			return verifyServer(cs, pool)
		},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if cert == nil {
				return &tls.Certificate{}, nil
			}
			return cert.get()
		},
	}
	return credentials.NewTLS(cfg), nil
}

// verifyServer checks the server's chain against roots and its name, as crypto/tls does.
func verifyServer(cs tls.ConnectionState, roots *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: the server sent no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: inter,
		DNSName:       cs.ServerName,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return fmt.Errorf("tls: server certificate: %w", err)
	}
	return nil
}

// watched re-reads a file set when one of them changes; a file that turns unreadable or invalid
// keeps the last good value (and the problem is logged).
type watched[T any] struct {
	paths []string
	load  func() (T, error)
	log   *slog.Logger

	// mu guards everything below.
	mu      sync.Mutex
	val     T
	ok      bool
	stamps  []time.Time
	checked time.Time
}

func (w *watched[T]) get() (T, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if w.ok && now.Sub(w.checked) < reloadCheckEvery {
		return w.val, nil
	}
	w.checked = now
	stamps := make([]time.Time, len(w.paths))
	for i, p := range w.paths {
		if fi, err := os.Stat(p); err == nil {
			stamps[i] = fi.ModTime()
		}
	}
	if w.ok && equalTimes(stamps, w.stamps) {
		return w.val, nil
	}
	v, err := w.load()
	if err != nil {
		if w.ok {
			w.log.Error("tls: keeping the last good files", "files", w.paths, "error", err)
			return w.val, nil
		}
		var zero T
		return zero, err
	}
	if w.ok {
		w.log.Info("tls: files reloaded", "files", w.paths)
	}
	w.val, w.ok, w.stamps = v, true, stamps
	return v, nil
}

func equalTimes(a, b []time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

type certFile = watched[*tls.Certificate]
type poolFile = watched[*x509.CertPool]

func newCertFile(certPath, keyPath string, log *slog.Logger) *certFile {
	return &certFile{paths: []string{certPath, keyPath}, log: orDefault(log), load: func() (*tls.Certificate, error) {
		kp, err := tls.LoadX509KeyPair(certPath, keyPath)
		if err != nil {
			return nil, fmt.Errorf("tls: certificate %s / key %s: %w", certPath, keyPath, err)
		}
		return &kp, nil
	}}
}

func newPoolFile(path string, log *slog.Logger) *poolFile {
	return &poolFile{paths: []string{path}, log: orDefault(log), load: func() (*x509.CertPool, error) {
		pem, err := os.ReadFile(path) // #nosec G304 -- the operator's --tls-ca / --tls-client-ca path
		if err != nil {
			return nil, fmt.Errorf("tls: CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls: CA file %s holds no PEM certificate", path)
		}
		return pool, nil
	}}
}

func orDefault(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.Default()
	}
	return log
}
