package mcpgateway

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestSignAssertion: the private_key_jwt assertion verifies with the public key, for EC (ES256)
// and RSA (RS256) keys in every PEM form, and carries the claims RFC 7523 asks for.
func TestSignAssertion(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	pkcs8 := func(k any) []byte { b, _ := x509.MarshalPKCS8PrivateKey(k); return b }
	sec1, _ := x509.MarshalECPrivateKey(ec)
	for _, tc := range []struct {
		name, pemType string
		der           []byte
		alg           string
	}{
		{"EC PKCS#8", "PRIVATE KEY", pkcs8(ec), "ES256"},
		{"EC SEC 1", "EC PRIVATE KEY", sec1, "ES256"},
		{"RSA PKCS#8", "PRIVATE KEY", pkcs8(rk), "RS256"},
		{"RSA PKCS#1", "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rk), "RS256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, err := parseAssertionKey(string(pem.EncodeToMemory(&pem.Block{Type: tc.pemType, Bytes: tc.der})))
			if err != nil {
				t.Fatal(err)
			}
			now := time.Unix(1_800_000_000, 0)
			jwt, err := signAssertion(key, "客户端-1", "https://as.example/tenant", now)
			if err != nil {
				t.Fatal(err)
			}
			parts := strings.Split(jwt, ".")
			if len(parts) != 3 {
				t.Fatalf("%d parts", len(parts))
			}
			var header map[string]string
			var claims map[string]any
			hb, _ := base64.RawURLEncoding.DecodeString(parts[0])
			cb, _ := base64.RawURLEncoding.DecodeString(parts[1])
			_ = json.Unmarshal(hb, &header)
			_ = json.Unmarshal(cb, &claims)
			if header["alg"] != tc.alg {
				t.Errorf("alg %q, want %q", header["alg"], tc.alg)
			}
			delete(claims, "jti")
			want := map[string]any{"iss": "客户端-1", "sub": "客户端-1", "aud": "https://as.example/tenant", "iat": float64(now.Unix()), "exp": float64(now.Add(5 * time.Minute).Unix())}
			if diff := cmp.Diff(want, claims); diff != "" {
				t.Errorf("claims (-want +got):\n%s", diff)
			}
			digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
			sig, _ := base64.RawURLEncoding.DecodeString(parts[2])
			switch k := key.(type) {
			case *ecdsa.PrivateKey:
				if len(sig) != 64 || !ecdsa.Verify(&k.PublicKey, digest[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
					t.Error("ES256 signature does not verify")
				}
			case *rsa.PrivateKey:
				if rsa.VerifyPKCS1v15(&k.PublicKey, crypto.SHA256, digest[:], sig) != nil {
					t.Error("RS256 signature does not verify")
				}
			}
		})
	}
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	for name, text := range map[string]string{
		"not PEM":  "-----BEGIN nothing",
		"garbage":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("xyz")})),
		"EC P-384": string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8(p384)})),
	} {
		if _, err := parseAssertionKey(text); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
