// Package devcerts makes a development certificate authority and certificates signed by it, for
// trying mutual TLS between Hermes' services on a laptop (`hermes certs`) and for tests. In a
// cluster, cert-manager issues them instead (deploy/k8s/components/cert-manager).
package devcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority that can sign certificates.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// CertPEM is the CA certificate, for --tls-ca and --tls-client-ca.
	CertPEM []byte
}

// NewCA makes a self-signed CA valid for the given time.
func NewCA(name string, valid time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(valid),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Issue signs a certificate for name, valid for the given hosts (DNS names or IP addresses) as
// a server and as a client. It returns the certificate and key in PEM.
func (ca *CA) Issue(name string, hosts []string, valid time.Duration) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(valid),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), nil
}

// WriteSet writes the layout cert-manager gives a pod — tls.crt, tls.key and ca.crt — for each
// name into dir/<name>/, and the CA certificate as dir/ca.crt. Keys are readable by the owner
// only. Existing files are replaced.
func (ca *CA) WriteSet(dir string, hosts map[string][]string, valid time.Duration) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca.CertPEM, 0o644); err != nil { // #nosec G306 -- a CA certificate is public
		return err
	}
	if len(hosts) == 0 {
		return errors.New("devcerts: no certificate to issue")
	}
	for name, hs := range hosts {
		c, k, err := ca.Issue(name, hs, valid)
		if err != nil {
			return fmt.Errorf("devcerts: %s: %w", name, err)
		}
		sub := filepath.Join(dir, name)
		if err := os.MkdirAll(sub, 0o700); err != nil {
			return err
		}
		for file, data := range map[string][]byte{"tls.crt": c, "tls.key": k, "ca.crt": ca.CertPEM} {
			if err := os.WriteFile(filepath.Join(sub, file), data, 0o600); err != nil {
				return err
			}
		}
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}
