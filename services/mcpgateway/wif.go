package mcpgateway

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"

	"github.com/hermes-agent/hermes/internal/errclass"
	"github.com/hermes-agent/hermes/internal/rpc"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// Workload identity federation (an http.oauth block with assertion_env; SEP-1933, the MCP
// extension io.modelcontextprotocol/auth/wif): the gateway's own workload token (a JWT its
// platform issues, such as a Kubernetes service account token or a cloud's identity token) is
// the authorization grant itself (RFC 7523 section 2.1), presented at the server's
// authorization server for the gateway's access token. The token is read from the operator's
// environment variable for each token request, so a rotated one is picked up.

// wifGrant gets tokens with a workload JWT as the grant.
type wifGrant struct {
	c      *serverConn
	o      *pb.OAuthClientCredentials
	secret string // the client's secret, "" for a client that sends only its id

	mu       sync.Mutex // guards tokenURL, style, scopes (discovered once)
	tokenURL string
	style    oauth2.AuthStyle
	scopes   []string
}

// token is a scopedFetch: a token asking for the configured or discovered scopes and extra.
// A refusal is returned as it is: the grant is not retried with another grant type.
func (w *wifGrant) token(extra []string) (*oauth2.Token, []string, error) {
	g := w.c.g
	ctx, cancel := context.WithTimeout(w.c.ctx, 3*g.oauth.requestTimeout)
	defer cancel()
	w.mu.Lock()
	if w.tokenURL == "" {
		if tu := w.o.GetTokenUrl(); tu != "" {
			w.tokenURL, w.scopes = tu, w.o.GetScopes()
			w.style = oauth2.AuthStyleInHeader
			if w.o.GetAuthMethod() == "client_secret_post" {
				w.style = oauth2.AuthStyleInParams
			}
		} else {
			ep, err := w.c.discoverTokenEndpoint(ctx, "wif", w.o.GetScopes())
			if err != nil {
				w.mu.Unlock()
				return nil, nil, err
			}
			if !isHTTPURL(ep.url) {
				w.mu.Unlock()
				return nil, nil, errclass.Errorf(errclass.Unavailable, "the authorization server's metadata names no http(s) token endpoint")
			}
			w.tokenURL, w.style, w.scopes = ep.url, authStyle(ep.methods, w.secret != ""), ep.scopes
		}
	}
	tokenURL, style, scopes := w.tokenURL, w.style, unionScopes(w.scopes, extra)
	w.mu.Unlock()
	assertion, err := g.powers.secret(w.o.GetAssertionEnv(), g.getenv)
	if err != nil {
		return nil, nil, fmt.Errorf("workload token: %w", err)
	}
	assertion = strings.TrimSpace(assertion)
	if err := checkWorkloadJWT(assertion, time.Now()); err != nil {
		return nil, nil, fmt.Errorf("workload token in %s: %w", w.o.GetAssertionEnv(), err)
	}
	form := url.Values{"grant_type": {grantJWTBearer}, "assertion": {assertion}}
	if len(scopes) > 0 {
		form.Set("scope", strings.Join(scopes, " "))
	}
	a, err := g.tokenRequest(ctx, "the authorization server", tokenURL, w.o.GetClientId(), w.secret, style, form)
	if err != nil {
		return nil, nil, fmt.Errorf("OAuth JWT bearer grant with the workload token: %w", err)
	}
	tok, err := a.bearer()
	if err != nil {
		return nil, nil, err
	}
	// A new token comes from presenting the workload token again (token), never from a refresh.
	tok.RefreshToken = ""
	return tok, scopes, nil
}

// checkWorkloadJWT refuses what cannot be a workload token before it is sent: too large, not a
// JWT, or expired (the platform has not rotated it). Its signature is the authorization
// server's to check.
func checkWorkloadJWT(tok string, now time.Time) error {
	if len(tok) > maxIDToken {
		return fmt.Errorf("longer than %d bytes", maxIDToken)
	}
	var header map[string]any
	var claims struct {
		Exp *float64 `json:"exp"`
	}
	if err := jwtParts(tok, &header, &claims); err != nil {
		return err
	}
	if claims.Exp != nil && now.After(time.Unix(int64(*claims.Exp), 0)) {
		return errclass.Errorf(errclass.Precondition, "the workload token has expired")
	}
	return nil
}

// validateWIF checks a client credentials block with assertion_env; field is its path.
func validateWIF(v *rpc.Violations, field string, o *pb.OAuthClientCredentials) {
	if !isEnvName(o.GetAssertionEnv()) {
		v.Add(field+".assertion_env", "must name an environment variable")
	}
	if o.GetPrivateKeyEnv() != "" {
		v.Add(field+".assertion_env", "cannot be combined with private_key_env: the workload token is the grant")
	}
	if e := o.GetClientSecretEnv(); e != "" && !isEnvName(e) {
		v.Add(field+".client_secret_env", "must name an environment variable")
	}
}
