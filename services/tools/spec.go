package tools

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hermes-agent/hermes/internal/egress"
	"github.com/hermes-agent/hermes/internal/secretenv"

	"golang.org/x/net/http/httpguts"
	"google.golang.org/protobuf/proto"

	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/tokenizer"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// Limits of a tool spec.
const (
	maxDescriptionBytes = 8 << 10
	maxGroups           = 16
	maxLabels           = 32
	maxHeaders          = 32
	maxRetriesLimit     = 10
)

var (
	// toolNameRE is the strictest rule model providers apply to function names.
	toolNameRE  = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	groupNameRE = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,64}$`)
	envNameRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	sourceRE    = regexp.MustCompile(`^(api|file|builtin|mcp:[a-zA-Z0-9_-]{1,64})$`)
	serverRE    = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
)

// compiledSpec is a spec's compiled schemas.
type compiledSpec struct {
	input  *compiledSchema
	output *compiledSchema // nil without an output schema
}

// specRules are the operator's rules a spec must follow: the secret variables it may name and
// the destinations it may reach.
type specRules struct {
	secrets *secretenv.Reader
	egress  *egress.Policy
}

// checkSpec validates a spec, normalizes it in place (compact schemas, sorted unique groups) and
// compiles its schemas. Every problem is added to v under field (for example "spec.name").
func checkSpec(spec *toolsv1.ToolSpec, builtins *Builtins, maxTimeout time.Duration, rules specRules, v *rpc.Violations) *compiledSpec {
	if spec == nil {
		v.Add("spec", "is required")
		return nil
	}
	if !toolNameRE.MatchString(spec.GetName()) {
		v.Add("spec.name", "%q must match ^[a-zA-Z0-9_-]{1,64}$ (letters, digits, '_' and '-', at most 64)", truncateRunes(spec.GetName(), 80))
	}
	if strings.TrimSpace(spec.GetDescription()) == "" {
		v.Add("spec.description", "is required: say what the tool does, for a model")
	}
	v.MaxLen("spec.description", spec.GetDescription(), maxDescriptionBytes)
	cs := checkSchemas(spec, v)
	checkLimits(spec, maxTimeout, v)
	checkGroupsAndLabels(spec, v)
	checkExecutor(spec, builtins, rules, v)
	return cs
}

// checkSchemas compiles the spec's input (required) and output schemas and compacts them.
func checkSchemas(spec *toolsv1.ToolSpec, v *rpc.Violations) *compiledSpec {
	cs := &compiledSpec{}
	if spec.GetInputSchema() == "" {
		v.Add("spec.input_schema", "is required: a JSON Schema with \"type\": \"object\"")
	} else if in, err := compileSchema(spec.GetInputSchema(), true); err != nil {
		v.Add("spec.input_schema", "%s", err.Error())
	} else {
		cs.input = in
		spec.InputSchema, _ = compactJSON(spec.GetInputSchema())
	}
	if spec.GetOutputSchema() != "" {
		if out, err := compileSchema(spec.GetOutputSchema(), false); err != nil {
			v.Add("spec.output_schema", "%s", err.Error())
		} else {
			cs.output = out
			spec.OutputSchema, _ = compactJSON(spec.GetOutputSchema())
		}
	}
	return cs
}

// checkLimits checks the spec's timeouts and retries against the service's bounds.
func checkLimits(spec *toolsv1.ToolSpec, maxTimeout time.Duration, v *rpc.Violations) {
	if t := spec.GetTimeout(); t != nil {
		if err := t.CheckValid(); err != nil || t.AsDuration() < time.Millisecond || t.AsDuration() > maxTimeout {
			v.Add("spec.timeout", "must be between 1ms and %s", maxTimeout)
		}
	}
	if t := spec.GetAttemptTimeout(); t != nil {
		if err := t.CheckValid(); err != nil || t.AsDuration() < time.Millisecond || t.AsDuration() > maxTimeout {
			v.Add("spec.attempt_timeout", "must be between 1ms and %s", maxTimeout)
		} else if spec.GetTimeout() != nil && t.AsDuration() > spec.GetTimeout().AsDuration() {
			v.Add("spec.attempt_timeout", "must not exceed timeout (%s)", spec.GetTimeout().AsDuration())
		}
	}
	if spec.MaxRetries != nil && (spec.GetMaxRetries() < 0 || spec.GetMaxRetries() > maxRetriesLimit) {
		v.Add("spec.max_retries", "must be between 0 and %d", maxRetriesLimit)
	}
}

// checkGroupsAndLabels checks the groups (then sorted and deduplicated) and the labels.
func checkGroupsAndLabels(spec *toolsv1.ToolSpec, v *rpc.Violations) {
	if len(spec.GetGroups()) > maxGroups {
		v.Add("spec.groups", "has %d groups; at most %d are allowed", len(spec.GetGroups()), maxGroups)
	}
	for _, g := range spec.GetGroups() {
		if !groupNameRE.MatchString(g) {
			v.Add("spec.groups", "%q must match ^[a-zA-Z0-9_.-]{1,64}$", truncateRunes(g, 80))
		}
	}
	groups := slices.Clone(spec.GetGroups())
	slices.Sort(groups)
	spec.Groups = slices.Compact(groups)

	if len(spec.GetLabels()) > maxLabels {
		v.Add("spec.labels", "has %d labels; at most %d are allowed", len(spec.GetLabels()), maxLabels)
	}
	for k, val := range spec.GetLabels() {
		if k == "" || len(k) > 128 || len(val) > 1024 {
			v.Add("spec.labels", "label %q: keys must be 1-128 bytes and values at most 1024", truncateRunes(k, 80))
		}
	}
}

// checkExecutor checks the one executor a spec must have.
func checkExecutor(spec *toolsv1.ToolSpec, builtins *Builtins, rules specRules, v *rpc.Violations) {
	switch ex := spec.GetExecutor().(type) {
	case *toolsv1.ToolSpec_Http:
		checkHTTPExecutor(ex.Http, rules, v)
	case *toolsv1.ToolSpec_Mcp:
		if !serverRE.MatchString(ex.Mcp.GetServer()) {
			v.Add("spec.mcp.server", "is required: the gateway's name of the MCP server")
		}
		if ex.Mcp.GetTool() == "" || len(ex.Mcp.GetTool()) > 256 {
			v.Add("spec.mcp.tool", "is required: the tool's name on its MCP server (at most 256 bytes)")
		}
	case *toolsv1.ToolSpec_Builtin:
		if _, ok := builtins.get(ex.Builtin.GetName()); !ok {
			v.Add("spec.builtin.name", "%q is not a builtin; available: %s", truncateRunes(ex.Builtin.GetName(), 80), strings.Join(builtins.names(), ", "))
		}
	default:
		v.Add("spec.executor", "is required: set http, mcp or builtin")
	}
}

func checkHTTPExecutor(h *toolsv1.HTTPExecutor, rules specRules, v *rpc.Violations) {
	u, err := url.Parse(h.GetUrl())
	switch {
	case h.GetUrl() == "":
		v.Add("spec.http.url", "is required")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		v.Add("spec.http.url", "%q must be an absolute http or https URL", truncateRunes(h.GetUrl(), 200))
	case u.User != nil:
		v.Add("spec.http.url", "must not carry credentials; use secret_env")
	default:
		// An address in the URL is refused now; a name is checked on every connection.
		if err := rules.checkURLAddr(u); err != nil {
			v.Add("spec.http.url", "%v", err)
		}
	}
	v.MaxLen("spec.http.url", h.GetUrl(), 4096)
	if len(h.GetHeaders()) > maxHeaders {
		v.Add("spec.http.headers", "has %d headers; at most %d are allowed", len(h.GetHeaders()), maxHeaders)
	}
	for k, val := range h.GetHeaders() {
		switch {
		case !httpguts.ValidHeaderFieldName(k) || !httpguts.ValidHeaderFieldValue(val) || len(val) > 4096:
			v.Add("spec.http.headers", "header %q is not a valid HTTP header", truncateRunes(k, 80))
		case looksSecret(k):
			v.Add("spec.http.headers", "header %q looks like a credential; headers are stored in clear, so put the secret in an environment variable and set secret_env (and secret_header: %q)", k, http.CanonicalHeaderKey(k))
		}
	}
	if e := h.GetSecretEnv(); e != "" && !envNameRE.MatchString(e) {
		v.Add("spec.http.secret_env", "%q is not an environment variable name", truncateRunes(e, 80))
	} else if e != "" && !rules.secrets.Allowed(e) {
		v.Add("spec.http.secret_env", "%s", secretenv.NotAllowed(e))
	}
	if sh := h.GetSecretHeader(); sh != "" {
		if !httpguts.ValidHeaderFieldName(sh) {
			v.Add("spec.http.secret_header", "%q is not a valid HTTP header name", truncateRunes(sh, 80))
		}
		if h.GetSecretEnv() == "" {
			v.Add("spec.http.secret_header", "needs secret_env")
		}
	}
}

// checkURLAddr refuses a URL whose host is an internal address the egress policy does not allow.
func (r specRules) checkURLAddr(u *url.URL) error {
	a, err := netip.ParseAddr(u.Hostname())
	if err != nil {
		return nil
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	n, _ := strconv.Atoi(port)
	eg := r.egress
	if eg == nil {
		eg = &egress.Policy{}
	}
	return eg.Check("", a, n)
}

// looksSecret reports header names that carry credentials.
func looksSecret(name string) bool {
	n := strings.ToLower(name)
	switch n {
	case "authorization", "proxy-authorization", "cookie":
		return true
	}
	for _, w := range []string{"token", "secret", "api-key", "apikey", "api_key", "password"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// specHash identifies a normalized spec's content.
func specHash(spec *toolsv1.ToolSpec) string {
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(spec)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// functionDefinition is the tool as a model request carries it (OpenAI-compatible function
// tool); its tokens are what the tool costs every turn it is sent.
func functionDefinition(spec *toolsv1.ToolSpec) []byte {
	b, _ := json.Marshal(map[string]any{
		"type": "function",
		"function": map[string]any{
			"name":        spec.GetName(),
			"description": spec.GetDescription(),
			"parameters":  json.RawMessage(spec.GetInputSchema()),
		},
	})
	return b
}

func schemaTokens(tok *tokenizer.Tokenizer, spec *toolsv1.ToolSpec) int32 {
	return int32(tok.Count(string(functionDefinition(spec))))
}

// sourceValid reports whether a registration source is one the service knows.
func sourceValid(s string) bool { return sourceRE.MatchString(s) }

func cloneSpec(s *toolsv1.ToolSpec) *toolsv1.ToolSpec { return proto.Clone(s).(*toolsv1.ToolSpec) }
