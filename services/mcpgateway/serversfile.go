package mcpgateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// maxServersFile bounds the servers file.
const maxServersFile = 4 << 20

// fileServer is one entry of the "mcpServers" format that desktop MCP clients (Claude Desktop,
// Claude Code, Cursor, Windsurf, Cline) use, plus Hermes' own optional keys. Unknown keys (for
// example autoApprove) are ignored so that a pasted configuration loads.
type fileServer struct {
	// stdio
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Env     map[string]string `json:"env"`
	Cwd     string            `json:"cwd"`
	// Streamable HTTP ("type": "http" or "streamable-http", or just a url)
	Type      string            `json:"type"`
	URL       string            `json:"url"`
	ServerURL string            `json:"serverUrl"` // Windsurf
	Headers   map[string]string `json:"headers"`
	// common
	Disabled bool            `json:"disabled"`
	Timeout  json.RawMessage `json:"timeout"` // Cline: seconds
	// Hermes
	Prefix          string          `json:"prefix"`
	Include         []string        `json:"include"`
	Exclude         []string        `json:"exclude"`
	CallTimeout     json.RawMessage `json:"callTimeout"` // "30s" or seconds
	ProtocolVersion string          `json:"protocolVersion"`
	BearerTokenEnv  string          `json:"bearerTokenEnv"`
	Groups          []string        `json:"groups"`
	Roots           []struct {
		URI  string `json:"uri"`
		Name string `json:"name"`
	} `json:"roots"`
	Elicitation string `json:"elicitation"`
	Sampling    *struct {
		Allow     bool  `json:"allow"`
		MaxTokens int32 `json:"maxTokens"`
		PerMinute int32 `json:"perMinute"`
		AskCaller bool  `json:"askCaller"`
	} `json:"sampling"`
	OAuth *struct {
		TokenURL        string   `json:"tokenUrl"`
		ClientID        string   `json:"clientId"`
		ClientSecretEnv string   `json:"clientSecretEnv"`
		Scopes          []string `json:"scopes"`
		AuthMethod      string   `json:"authMethod"`
		PrivateKeyEnv   string   `json:"privateKeyEnv"`
		AssertionEnv    string   `json:"assertionEnv"`
	} `json:"oauth"`
	// UserOAuth: each user connects their own account (authorization code flow).
	UserOAuth *struct {
		ClientID        string   `json:"clientId"`
		ClientSecretEnv string   `json:"clientSecretEnv"`
		Scopes          []string `json:"scopes"`
		Issuer          string   `json:"issuer"`
	} `json:"userOauth"`
	// EnterpriseOAuth: each user connects with their identity at the enterprise's IdP (SEP-990).
	EnterpriseOAuth *struct {
		IdpIssuer          string   `json:"idpIssuer"`
		IdpTokenURL        string   `json:"idpTokenUrl"`
		IdpClientID        string   `json:"idpClientId"`
		IdpClientSecretEnv string   `json:"idpClientSecretEnv"`
		ClientID           string   `json:"clientId"`
		ClientSecretEnv    string   `json:"clientSecretEnv"`
		Scopes             []string `json:"scopes"`
		Issuer             string   `json:"issuer"`
	} `json:"enterpriseOauth"`
}

// badEntry is an entry of the servers file that cannot be used, and why.
type badEntry struct {
	name string // cleaned, as the server would have been named
	err  string
}

// LoadServersFile reads an mcpServers file into server specs, by name, and the entries that
// cannot be used (reported as failed servers, so one bad entry does not stop the rest). ${VAR}
// and ${VAR:-default} in commands, arguments, environment values, URLs and headers are expanded
// from getenv, as Claude Code does, so secrets can stay out of the file. The error is for a file
// that cannot be read or is not an mcpServers file at all.
func LoadServersFile(path string, getenv func(string) string) ([]*pb.ServerSpec, []badEntry, error) {
	data, err := os.ReadFile(path) // #nosec G304 -- the operator's --mcp-servers file
	if err != nil {
		return nil, nil, fmt.Errorf("MCP servers file: %w", err)
	}
	if len(data) > maxServersFile {
		return nil, nil, fmt.Errorf("MCP servers file %s is %d bytes; at most %d are allowed", path, len(data), maxServersFile)
	}
	specs, bad, err := parseServerEntries(data, getenv)
	if err != nil {
		return nil, nil, fmt.Errorf("MCP servers file %s: %w", path, err)
	}
	return specs, bad, nil
}

// ParseServers parses the mcpServers JSON format (the "servers" key of VS Code's mcp.json is
// accepted too; so are JSONC comments and trailing commas). Any entry that cannot be used is an
// error.
func ParseServers(data []byte, getenv func(string) string) ([]*pb.ServerSpec, error) {
	specs, bad, err := parseServerEntries(data, getenv)
	if err != nil {
		return nil, err
	}
	if len(bad) > 0 {
		errs := make([]string, 0, len(bad))
		for _, b := range bad {
			errs = append(errs, b.err)
		}
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return specs, nil
}

func parseServerEntries(data []byte, getenv func(string) string) ([]*pb.ServerSpec, []badEntry, error) {
	var root struct {
		MCPServers map[string]json.RawMessage `json:"mcpServers"`
		Servers    map[string]json.RawMessage `json:"servers"`
	}
	dec := json.NewDecoder(bytes.NewReader(stripJSONC(data)))
	if err := dec.Decode(&root); err != nil {
		return nil, nil, fmt.Errorf("not valid JSON: %w", err)
	}
	entries := root.MCPServers
	if entries == nil {
		entries = root.Servers
	}
	if entries == nil {
		return nil, nil, fmt.Errorf(`no "mcpServers" object`)
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	var specs []*pb.ServerSpec
	seen := map[string]string{}
	var bad []badEntry
	for _, raw := range names {
		name := CleanName(raw, maxServerName)
		fail := func(msg string) { bad = append(bad, badEntry{name: name, err: msg}) }
		var fs fileServer
		if err := json.Unmarshal(entries[raw], &fs); err != nil {
			fail(fmt.Sprintf("%q: %v", raw, err))
			continue
		}
		if fs.Disabled {
			continue
		}
		if prev, ok := seen[name]; ok {
			fail(fmt.Sprintf("%q and %q both become the server name %q", prev, raw, name))
			continue
		}
		seen[name] = raw
		spec, err := fs.spec(name, getenv)
		if err != nil {
			fail(fmt.Sprintf("%q: %v", raw, err))
			continue
		}
		if err := checkSpec(raw, spec); err != nil {
			fail(err.Error())
			continue
		}
		specs = append(specs, spec)
	}
	return specs, bad, nil
}

// stripJSONC removes // and /* */ comments and trailing commas outside strings, so that a
// JSONC file (VS Code's mcp.json, Zed's settings) parses as JSON. Removed bytes become spaces
// (newlines stay), so offsets in JSON errors still point at the right place.
func stripJSONC(data []byte) []byte {
	if !bytes.Contains(data, []byte("/")) && !bytes.Contains(data, []byte(",")) {
		return data
	}
	out := bytes.Clone(data)
	blank := func(from, to int) {
		for k := from; k < to; k++ {
			if out[k] != '\n' {
				out[k] = ' '
			}
		}
	}
	// Comments first, then trailing commas, each pass skipping strings.
	forEachOutsideStrings(out, func(i int) int {
		switch {
		case out[i] == '/' && i+1 < len(out) && out[i+1] == '/':
			end := bytes.IndexByte(out[i:], '\n')
			if end < 0 {
				end = len(out) - i
			}
			blank(i, i+end)
			return i + end
		case out[i] == '/' && i+1 < len(out) && out[i+1] == '*':
			end := bytes.Index(out[i+2:], []byte("*/"))
			if end < 0 {
				end = len(out) - i - 2
			} else {
				end += 2
			}
			blank(i, i+2+end)
			return i + 2 + end
		}
		return i + 1
	})
	forEachOutsideStrings(out, func(i int) int {
		if out[i] == ',' {
			j := i + 1
			for j < len(out) && (out[j] == ' ' || out[j] == '\t' || out[j] == '\n' || out[j] == '\r') {
				j++
			}
			if j < len(out) && (out[j] == '}' || out[j] == ']') {
				out[i] = ' '
			}
		}
		return i + 1
	})
	return out
}

// forEachOutsideStrings calls visit with each index of data outside JSON strings; visit returns
// the next index to look at.
func forEachOutsideStrings(data []byte, visit func(int) int) {
	for i := 0; i < len(data); {
		if data[i] != '"' {
			i = visit(i)
			continue
		}
		for i++; i < len(data) && data[i] != '"'; i++ {
			if data[i] == '\\' {
				i++
			}
		}
		i++
	}
}

func (fs fileServer) spec(name string, getenv func(string) string) (*pb.ServerSpec, error) {
	x := func(s string) string { return expandEnv(s, getenv) }
	spec := &pb.ServerSpec{
		Name:            name,
		Prefix:          fs.Prefix,
		Include:         fs.Include,
		Exclude:         fs.Exclude,
		ProtocolVersion: fs.ProtocolVersion,
		Groups:          fs.Groups,
	}
	spec.Elicitation = fs.Elicitation
	for _, r := range fs.Roots {
		spec.Roots = append(spec.Roots, &pb.Root{Uri: expandEnv(r.URI, getenv), Name: r.Name})
	}
	if sp := fs.Sampling; sp != nil {
		spec.Sampling = &pb.SamplingPolicy{Allow: sp.Allow, MaxTokens: sp.MaxTokens, PerMinute: sp.PerMinute, AskCaller: sp.AskCaller}
	}
	timeout, err := parseTimeout(fs.CallTimeout)
	if err == nil && timeout == 0 {
		timeout, err = parseTimeout(fs.Timeout)
	}
	if err != nil {
		return nil, err
	}
	if timeout > 0 {
		spec.CallTimeout = durationpb.New(timeout)
	}
	url := fs.URL
	if url == "" {
		url = fs.ServerURL
	}
	t := strings.ToLower(strings.TrimSpace(fs.Type))
	if t == "" {
		if url != "" {
			t = "http"
		} else {
			t = "stdio"
		}
	}
	switch t {
	case "sse":
		return nil, fmt.Errorf(`type "sse" is the deprecated HTTP+SSE transport, which Hermes does not speak; use the server's Streamable HTTP endpoint ("type": "http")`)
	case "http", "streamable-http", "streamablehttp", "streamable_http":
		if fs.Command != "" {
			return nil, fmt.Errorf("give either command (stdio) or url (Streamable HTTP), not both")
		}
		if url == "" {
			return nil, fmt.Errorf(`type %q needs "url" (or Windsurf's "serverUrl")`, fs.Type)
		}
		h := &pb.HTTPTransport{Url: x(url), BearerTokenEnv: fs.BearerTokenEnv, Headers: map[string]string{}}
		for k, v := range fs.Headers {
			h.Headers[k] = x(v)
		}
		if o := fs.OAuth; o != nil {
			h.Oauth = &pb.OAuthClientCredentials{TokenUrl: x(o.TokenURL), ClientId: x(o.ClientID), ClientSecretEnv: o.ClientSecretEnv, Scopes: o.Scopes, AuthMethod: o.AuthMethod, PrivateKeyEnv: o.PrivateKeyEnv, AssertionEnv: o.AssertionEnv}
		}
		if o := fs.UserOAuth; o != nil {
			h.UserOauth = &pb.OAuthAuthorizationCode{ClientId: x(o.ClientID), ClientSecretEnv: o.ClientSecretEnv, Scopes: o.Scopes, Issuer: x(o.Issuer)}
		}
		if o := fs.EnterpriseOAuth; o != nil {
			h.EnterpriseOauth = &pb.OAuthEnterprise{IdpIssuer: x(o.IdpIssuer), IdpTokenUrl: x(o.IdpTokenURL), IdpClientId: x(o.IdpClientID), IdpClientSecretEnv: o.IdpClientSecretEnv,
				ClientId: x(o.ClientID), ClientSecretEnv: o.ClientSecretEnv, Scopes: o.Scopes, Issuer: x(o.Issuer)}
		}
		spec.Transport = &pb.ServerSpec_Http{Http: h}
	case "stdio":
		if url != "" {
			return nil, fmt.Errorf("give either command (stdio) or url (Streamable HTTP), not both")
		}
		st := &pb.StdioTransport{Command: x(fs.Command), WorkingDir: x(fs.Cwd), Env: map[string]string{}}
		for _, a := range fs.Args {
			st.Args = append(st.Args, x(a))
		}
		for k, v := range fs.Env {
			st.Env[k] = x(v)
		}
		spec.Transport = &pb.ServerSpec_Stdio{Stdio: st}
	default:
		return nil, fmt.Errorf("unknown type %q (want \"stdio\" or \"http\")", fs.Type)
	}
	return spec, nil
}

// parseTimeout reads "30s" or a number of seconds.
func parseTimeout(raw json.RawMessage) (time.Duration, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if d, err := time.ParseDuration(s); err == nil {
			return d, nil
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return time.Duration(f * float64(time.Second)), nil
		}
		return 0, fmt.Errorf("timeout %q is neither a duration nor seconds", s)
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil || f < 0 {
		return 0, fmt.Errorf("timeout %s is neither a duration nor seconds", raw)
	}
	return time.Duration(f * float64(time.Second)), nil
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// expandEnv replaces ${VAR} and ${VAR:-default}; a bare $ is left alone.
func expandEnv(s string, getenv func(string) string) string {
	if !strings.Contains(s, "${") {
		return s
	}
	return envRef.ReplaceAllStringFunc(s, func(m string) string {
		sub := envRef.FindStringSubmatch(m)
		if v := getenv(sub[1]); v != "" {
			return v
		}
		return sub[3]
	})
}
