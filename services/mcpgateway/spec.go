package mcpgateway

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hermes-agent/hermes/internal/rpc"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// ValidateSpec checks a server spec; field paths are prefixed with field.
// The parts run in a fixed order so a bad spec always gets its violations in the same
// order; OAuth comes last although it lives under http, as it always has.
func ValidateSpec(v *rpc.Violations, field string, s *pb.ServerSpec) {
	if s == nil {
		v.Add(field, "is required")
		return
	}
	validateNames(v, field, s)
	switch t := s.Transport.(type) {
	case *pb.ServerSpec_Stdio:
		validateStdio(v, field+".stdio", t.Stdio)
	case *pb.ServerSpec_Http:
		validateHTTP(v, field+".http", t.Http)
	default:
		v.Add(field+".transport", "set stdio or http")
	}
	validateFilters(v, field, s)
	validateCalls(v, field, s)
	validateClientFeatures(v, field, s)
	if o := s.GetHttp().GetOauth(); o != nil {
		validateOAuth(v, field+".http.oauth", o)
	}
	if o := s.GetHttp().GetUserOauth(); o != nil {
		validateUserOAuth(v, field+".http.user_oauth", s.GetHttp(), o)
	}
	if o := s.GetHttp().GetEnterpriseOauth(); o != nil {
		validateEnterpriseOAuth(v, field+".http.enterprise_oauth", s.GetHttp(), o)
	}
}

// validateUserOAuth checks an HTTP transport's per-user OAuth block; field is the path of the
// block.
func validateUserOAuth(v *rpc.Violations, field string, ht *pb.HTTPTransport, o *pb.OAuthAuthorizationCode) {
	if ht.GetOauth() != nil || ht.GetBearerTokenEnv() != "" {
		v.Add(field, "cannot be combined with oauth or bearer_token_env: calls use the calling user's token")
	}
	if len(o.GetClientId()) > maxPattern {
		v.Add(field+".client_id", "is longer than %d bytes", maxPattern)
	}
	if e := o.GetClientSecretEnv(); e != "" {
		if !isEnvName(e) {
			v.Add(field+".client_secret_env", "must name an environment variable")
		}
		if o.GetClientId() == "" {
			v.Add(field+".client_secret_env", "needs client_id (a dynamically registered client gets its own secret)")
		}
	}
	validateScopes(v, field+".scopes", o.GetScopes())
	validateIssuerPin(v, field+".issuer", o.GetIssuer())
}

// validateIssuerPin checks a configured authorization server issuer (user_oauth.issuer,
// enterprise_oauth.issuer).
func validateIssuerPin(v *rpc.Violations, field, issuer string) {
	if issuer != "" && (len(issuer) > maxURL || !isHTTPURL(issuer)) {
		v.Add(field, "must be an absolute http or https URL of at most %d bytes", maxURL)
	}
}

// validateScopes checks a list of OAuth scope tokens.
func validateScopes(v *rpc.Violations, field string, scopes []string) {
	tooMany(v, field, len(scopes), maxPatterns, "scopes")
	for i, sc := range scopes {
		if sc == "" || len(sc) > maxPattern || strings.ContainsAny(sc, " \"\\\x00") {
			v.Add(fmt.Sprintf("%s[%d]", field, i), "must be a scope token of at most %d bytes", maxPattern)
		}
	}
}

// validateNames checks the server's name and its optional tool-name prefix.
func validateNames(v *rpc.Violations, field string, s *pb.ServerSpec) {
	switch {
	case s.Name == "":
		v.Add(field+".name", "is required")
	case !serverNameRE.MatchString(s.Name):
		v.Add(field+".name", "must match %s", serverNameRE)
	}
	if s.Prefix != "" && !serverNameRE.MatchString(s.Prefix) {
		v.Add(field+".prefix", "must match %s", serverNameRE)
	}
}

// validateStdio checks a stdio transport; field is the path of the transport itself.
func validateStdio(v *rpc.Violations, field string, st *pb.StdioTransport) {
	switch {
	case st.GetCommand() == "":
		v.Add(field+".command", "is required")
	case len(st.GetCommand()) > maxCommand:
		v.Add(field+".command", "is longer than %d bytes", maxCommand)
	}
	tooMany(v, field+".args", len(st.GetArgs()), maxArgs, "arguments")
	for i, a := range st.GetArgs() {
		if len(a) > maxArg || strings.ContainsRune(a, 0) {
			v.Add(fmt.Sprintf("%s.args[%d]", field, i), "must be at most %d bytes without NUL", maxArg)
		}
	}
	tooMany(v, field+".env", len(st.GetEnv()), maxEnv, "variables")
	for k, val := range st.GetEnv() {
		if k == "" || strings.ContainsAny(k, "=\x00") || len(val) > maxEnvValue || strings.ContainsRune(val, 0) {
			v.Add(field+".env["+abbreviate(k, 64)+"]", "needs a name without '=' or NUL and a value of at most %d bytes", maxEnvValue)
		}
	}
	if len(st.GetWorkingDir()) > maxCommand {
		v.Add(field+".working_dir", "is longer than %d bytes", maxCommand)
	}
}

// validateHTTP checks an HTTP transport but not its OAuth block (validateOAuth);
// field is the path of the transport itself.
func validateHTTP(v *rpc.Violations, field string, ht *pb.HTTPTransport) {
	switch {
	case ht.GetUrl() == "":
		v.Add(field+".url", "is required")
	case len(ht.GetUrl()) > maxURL:
		v.Add(field+".url", "is longer than %d bytes", maxURL)
	case !isHTTPURL(ht.GetUrl()):
		v.Add(field+".url", "must be an absolute http or https URL")
	}
	validateHeaders(v, field+".headers", ht.GetHeaders())
	if e := ht.GetBearerTokenEnv(); e != "" && !isEnvName(e) {
		v.Add(field+".bearer_token_env", "must be an environment variable name")
	}
}

// validateHeaders checks the fixed headers sent with every HTTP request: names that
// cannot split a header line and single-line values.
func validateHeaders(v *rpc.Violations, field string, headers map[string]string) {
	tooMany(v, field, len(headers), maxHeaders, "headers")
	for k, val := range headers {
		if k == "" || strings.ContainsAny(k, " :\r\n\x00") || len(val) > maxHeaderValue || strings.ContainsAny(val, "\r\n\x00") {
			v.Add(field+"["+abbreviate(k, 64)+"]", "needs a header name and a single-line value of at most %d bytes", maxHeaderValue)
		}
	}
}

// validateOAuth checks an HTTP transport's OAuth client-credentials block; field is
// the path of the block.
func validateOAuth(v *rpc.Violations, field string, o *pb.OAuthClientCredentials) {
	if tu := o.GetTokenUrl(); tu != "" && (len(tu) > maxURL || !isHTTPURL(tu)) {
		v.Add(field+".token_url", "must be an absolute http or https URL of at most %d bytes", maxURL)
	}
	if o.GetClientId() == "" || len(o.GetClientId()) > maxPattern {
		v.Add(field+".client_id", "is required, at most %d bytes", maxPattern)
	}
	switch pk := o.GetPrivateKeyEnv(); {
	case o.GetAssertionEnv() != "":
		validateWIF(v, field, o)
	case pk != "" && o.GetClientSecretEnv() != "":
		v.Add(field+".private_key_env", "cannot be combined with client_secret_env: the client authenticates with one of them")
	case pk != "" && !isEnvName(pk):
		v.Add(field+".private_key_env", "must name an environment variable")
	case pk == "" && !isEnvName(o.GetClientSecretEnv()):
		v.Add(field+".client_secret_env", "must name an environment variable (or set private_key_env)")
	}
	validateScopes(v, field+".scopes", o.GetScopes())
	switch m := o.GetAuthMethod(); {
	case o.GetPrivateKeyEnv() != "" && m != "" && m != "private_key_jwt":
		v.Add(field+".auth_method", `must be "private_key_jwt" (or empty) with private_key_env`)
	case o.GetPrivateKeyEnv() == "" && m != "" && m != "client_secret_basic" && m != "client_secret_post":
		v.Add(field+".auth_method", `must be "client_secret_basic" or "client_secret_post"`)
	}
}

// validateFilters checks the include and exclude tool-name globs.
func validateFilters(v *rpc.Violations, field string, s *pb.ServerSpec) {
	for _, p := range []struct {
		name string
		list []string
	}{{"include", s.Include}, {"exclude", s.Exclude}} {
		tooMany(v, field+"."+p.name, len(p.list), maxPatterns, "patterns")
		for i, pat := range p.list {
			if len(pat) > maxPattern {
				v.Add(fmt.Sprintf("%s.%s[%d]", field, p.name, i), "is longer than %d bytes", maxPattern)
			} else if err := validatePatterns([]string{pat}); err != nil {
				v.Add(fmt.Sprintf("%s.%s[%d]", field, p.name, i), "is not a valid glob: %v", err)
			}
		}
	}
}

// validateCalls checks how the gateway talks to the server: call timeout, protocol
// version and the groups its tools are offered in.
func validateCalls(v *rpc.Violations, field string, s *pb.ServerSpec) {
	if d := s.GetCallTimeout(); d != nil {
		if err := d.CheckValid(); err != nil || d.AsDuration() <= 0 || d.AsDuration() > maxCallTimeout {
			v.Add(field+".call_timeout", "must be between 0 and %s", maxCallTimeout)
		}
	}
	if s.ProtocolVersion != "" && !slices.Contains(mcp.SupportedProtocolVersions(), s.ProtocolVersion) {
		v.Add(field+".protocol_version", "must be one of %s", strings.Join(mcp.SupportedProtocolVersions(), ", "))
	}
	tooMany(v, field+".groups", len(s.Groups), maxGroups, "groups")
	for i, gr := range s.Groups {
		if !toolNameRE.MatchString(gr) {
			v.Add(fmt.Sprintf("%s.groups[%d]", field, i), "must match %s", toolNameRE)
		}
	}
}

// validateClientFeatures checks what the gateway offers the server as its MCP client:
// sampling limits, the elicitation answer and the roots.
func validateClientFeatures(v *rpc.Violations, field string, s *pb.ServerSpec) {
	if sp := s.GetSampling(); sp != nil {
		if sp.MaxTokens < 0 || sp.MaxTokens > maxSamplingTokens {
			v.Add(field+".sampling.max_tokens", "must be between 0 and %d", maxSamplingTokens)
		}
		if sp.PerMinute < 0 || sp.PerMinute > maxSamplingRate {
			v.Add(field+".sampling.per_minute", "must be between 0 and %d", maxSamplingRate)
		}
	}
	switch s.GetElicitation() {
	case "", "decline", "defaults", "ask":
	default:
		v.Add(field+".elicitation", `must be "decline", "defaults" or "ask"`)
	}
	tooMany(v, field+".roots", len(s.Roots), maxRoots, "roots")
	for i, r := range s.Roots {
		u, err := url.Parse(r.GetUri())
		if err != nil || u.Scheme != "file" || len(r.GetUri()) > maxURI || len(r.GetName()) > maxPattern {
			v.Add(fmt.Sprintf("%s.roots[%d]", field, i), "needs a file:// URI of at most %d bytes and a name of at most %d", maxURI, maxPattern)
		}
	}
}

// tooMany records field when a list holds more than max items of noun.
func tooMany(v *rpc.Violations, field string, n, max int, noun string) {
	if n > max {
		v.Add(field, "has %d %s; at most %d are allowed", n, noun, max)
	}
}

// isHTTPURL reports whether s is an absolute http or https URL with a host.
func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// isEnvName reports whether e can name an environment variable holding a secret.
func isEnvName(e string) bool {
	return e != "" && len(e) <= 256 && !strings.ContainsAny(e, "=\x00 ")
}
