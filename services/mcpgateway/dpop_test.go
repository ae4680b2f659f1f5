package mcpgateway

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/oauth2"
)

// decodeProof checks a proof's signature with the key its header names and returns its header
// and claims.
func decodeProof(t *testing.T, proof string) (map[string]any, map[string]any) {
	t.Helper()
	parts := strings.Split(proof, ".")
	if len(parts) != 3 {
		t.Fatalf("proof %q is not a JWS", proof)
	}
	var header, claims map[string]any
	for i, v := range []*map[string]any{&header, &claims} {
		raw, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil || json.Unmarshal(raw, v) != nil {
			t.Fatalf("proof part %d does not decode: %v", i, err)
		}
	}
	jwk, _ := header["jwk"].(map[string]any)
	if _, private := jwk["d"]; private {
		t.Fatal("the proof's jwk has the private key")
	}
	coord := func(k string) *big.Int {
		s, _ := jwk[k].(string)
		b, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil || len(b) != 32 {
			t.Fatalf("jwk %s: %v", k, err)
		}
		return new(big.Int).SetBytes(b)
	}
	pub := &ecdsa.PublicKey{Curve: elliptic.P256(), X: coord("x"), Y: coord("y")}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(sig) != 64 {
		t.Fatalf("signature: %v", err)
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if !ecdsa.Verify(pub, digest[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
		t.Fatal("the proof's signature does not verify with its jwk")
	}
	return header, claims
}

// TestDPoPProof: a proof names the method, the URL without query and fragment, the access
// token's hash and the nonce, carries only the public key, and has a fresh jti each time.
func TestDPoPProof(t *testing.T) {
	der, err := newDPoPKey()
	if err != nil {
		t.Fatal(err)
	}
	key, err := parseDPoPKey(der)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	p1, err := dpopProof(key, "POST", "https://mcp.example/mcp?x=1#f", "tok", "n1", now)
	if err != nil {
		t.Fatal(err)
	}
	header, claims := decodeProof(t, p1)
	if header["typ"] != "dpop+jwt" || header["alg"] != "ES256" {
		t.Errorf("header %v", header)
	}
	ath := sha256.Sum256([]byte("tok"))
	want := map[string]any{"htm": "POST", "htu": "https://mcp.example/mcp", "iat": float64(now.Unix()), "ath": base64.RawURLEncoding.EncodeToString(ath[:]), "nonce": "n1"}
	jti := claims["jti"]
	delete(claims, "jti")
	if d := cmp.Diff(want, claims); d != "" {
		t.Errorf("claims (-want +got):\n%s", d)
	}
	p2, err := dpopProof(key, "POST", "https://as.example/token", "", "", now)
	if err != nil {
		t.Fatal(err)
	}
	_, c2 := decodeProof(t, p2)
	if c2["jti"] == jti || c2["ath"] != nil || c2["nonce"] != nil {
		t.Errorf("second proof %v: want a new jti, no ath, no nonce", c2)
	}
	if _, err := parseDPoPKey([]byte("not a key")); err == nil {
		t.Error("parseDPoPKey accepted garbage")
	}
}

// TestDPoPTransport: proofs go with the token the key is bound to only; a use_dpop_nonce
// answer (a resource server's 401, an authorization server's 400) is retried once with the
// nonce and the same body; a server that keeps asking is not asked again in a loop.
func TestDPoPTransport(t *testing.T) {
	der, _ := newDPoPKey()
	key, _ := parseDPoPKey(der)
	type seen struct{ proof, nonce, body string }
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var nonce string
		if p := r.Header.Get("DPoP"); p != "" {
			_, claims := decodeProof(t, p)
			nonce, _ = claims["nonce"].(string)
		}
		mu.Lock()
		got = append(got, seen{r.Header.Get("DPoP"), nonce, string(body)})
		mu.Unlock()
		switch {
		case r.URL.Path == "/never":
			w.Header().Set("DPoP-Nonce", "n-"+randomText())
			w.Header().Set("WWW-Authenticate", `DPoP error="use_dpop_nonce"`)
			w.WriteHeader(http.StatusUnauthorized)
		case nonce != "n1" && r.URL.Path == "/rs":
			w.Header().Set("DPoP-Nonce", "n1")
			w.Header().Set("WWW-Authenticate", `DPoP error="use_dpop_nonce", resource_metadata="x"`)
			w.WriteHeader(http.StatusUnauthorized)
		case nonce != "n1" && r.URL.Path == "/token":
			w.Header().Set("DPoP-Nonce", "n1")
			writeJSONStatus(w, http.StatusBadRequest, map[string]string{"error": "use_dpop_nonce"})
		default:
			_, _ = io.WriteString(w, "ok")
		}
	}))
	t.Cleanup(srv.Close)
	do := func(path, token string) (int, []seen) {
		t.Helper()
		mu.Lock()
		got = nil
		mu.Unlock()
		tr := &dpopTransport{base: http.DefaultTransport, key: func(tok string) *ecdsa.PrivateKey {
			if tok == "bound" || tok == "" && path == "/token" {
				return key
			}
			return nil
		}}
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader("payload"))
		if token != "" {
			req.Header.Set("Authorization", "DPoP "+token)
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		mu.Lock()
		defer mu.Unlock()
		return resp.StatusCode, got
	}
	for _, c := range []struct {
		name, path, token string
		status            int
		nonces            []string // the nonce of each request seen, "-" for no proof
	}{
		{"resource server nonce", "/rs", "bound", 200, []string{"", "n1"}},
		{"authorization server nonce", "/token", "", 200, []string{"", "n1"}},
		{"a token the key is not bound to", "/ok", "other", 200, []string{"-"}},
		{"a server that keeps asking", "/never", "bound", 401, []string{"", "n?"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, reqs := do(c.path, c.token)
			if status != c.status || len(reqs) != len(c.nonces) {
				t.Fatalf("status %d after %d requests, want %d after %d", status, len(reqs), c.status, len(c.nonces))
			}
			for i, r := range reqs {
				if r.body != "payload" {
					t.Errorf("request %d body %q", i, r.body)
				}
				switch want := c.nonces[i]; {
				case want == "-":
					if r.proof != "" {
						t.Errorf("request %d has a proof for a token not bound to the key", i)
					}
				case want == "n?":
					if !strings.HasPrefix(r.nonce, "n-") {
						t.Errorf("request %d nonce %q, want the server's", i, r.nonce)
					}
				case r.proof == "" || r.nonce != want:
					t.Errorf("request %d: proof %t, nonce %q, want %q", i, r.proof != "", r.nonce, want)
				}
			}
		})
	}
}

// TestAdvertisesDPoP: DPoP is used only where the metadata lists ES256.
func TestAdvertisesDPoP(t *testing.T) {
	for doc, want := range map[string]bool{
		`{"dpop_signing_alg_values_supported":["ES256","RS256"]}`: true,
		`{"dpop_signing_alg_values_supported":["RS256"]}`:         false,
		`{"dpop_signing_alg_values_supported":[]}`:                false,
		`{"dpop_signing_alg_values_supported":["none"]}`:          false,
		`{}`:       false,
		`not json`: false,
	} {
		if got := advertisesDPoP([]byte(doc)); got != want {
			t.Errorf("advertisesDPoP(%s) = %v, want %v", doc, got, want)
		}
	}
}

// keyFor gives the connection's key for its own access token only, parses it once, and follows
// a connection that changed to another key.
func TestUserTokensKeyFor(t *testing.T) {
	der1, err := newDPoPKey()
	if err != nil {
		t.Fatal(err)
	}
	der2, err := newDPoPKey()
	if err != nil {
		t.Fatal(err)
	}
	ut := &userTokens{conn: &userConnection{Token: oauth2.Token{AccessToken: "at-1"}, DPoPKey: der1}}
	if ut.keyFor("another") != nil || ut.keyFor("") != nil {
		t.Error("a key for a token that is not the connection's")
	}
	k1 := ut.keyFor("at-1")
	if k1 == nil {
		t.Fatal("no key for the connection's token")
	}
	if want, _ := parseDPoPKey(der1); !k1.Equal(want) {
		t.Error("the key is not the connection's")
	}
	if ut.keyFor("at-1") != k1 {
		t.Error("the key was parsed again for the same connection")
	}
	ut.conn = &userConnection{Token: oauth2.Token{AccessToken: "at-2"}, DPoPKey: der2}
	k2 := ut.keyFor("at-2")
	if want, _ := parseDPoPKey(der2); k2 == nil || !k2.Equal(want) {
		t.Error("the key of the changed connection is not its own")
	}
	ut.conn = &userConnection{Token: oauth2.Token{AccessToken: "at-3"}}
	if ut.keyFor("at-3") != nil {
		t.Error("a key for a connection without DPoP")
	}
}
