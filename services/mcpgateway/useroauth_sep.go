package mcpgateway

import (
	"net"
	"net/url"
	"strings"

	"github.com/hermes-agent/hermes/internal/errclass"
)

// applicationType is the OpenID Connect application_type Hermes registers with (MCP SEP-837;
// OpenID Connect Dynamic Client Registration section 2): "native" when the redirect URI is an
// http URI on a loopback host (localhost, 127.0.0.0/8, ::1), which an authorization server
// refuses for a "web" client, the default it assumes when the field is absent; else "web",
// since Hermes is a server-side application receiving the callback on its own HTTPS listener.
func applicationType(redirect string) string {
	u, err := url.Parse(redirect)
	if err != nil || u.Scheme != "http" {
		return "web"
	}
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") {
		return "native"
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return "native"
	}
	return "web"
}

// checkIss checks the iss parameter of an authorization response (RFC 9207 section 2.4, MCP
// SEP-2468): when present it must be the issuer recorded from the authorization server's
// metadata, compared as plain strings (no case folding, trailing-slash or port normalization:
// a variant is another issuer); when absent it is refused if the metadata advertised
// authorization_response_iss_parameter_supported, since a mix-up attacker's response is what
// lacks it. An endpoint with no recorded issuer (none is known) accepts a response without iss
// and refuses one with iss, which cannot be checked.
func checkIss(ep *oauthEndpoint, iss string) error {
	switch {
	case iss == "" && ep.IssRequired:
		return errclass.Errorf(errclass.Invalid, "the authorization response has no iss parameter, which the authorization server said it sends (RFC 9207): it may come from another server; connect again")
	case iss != "" && iss != ep.Issuer:
		return errclass.Errorf(errclass.Invalid, "the authorization response comes from another issuer than the server's")
	}
	return nil
}
