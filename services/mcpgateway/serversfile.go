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

	"github.com/hermes-agent/hermes/internal/rpc"
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
	Type    string            `json:"type"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
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
}

// LoadServersFile reads an mcpServers file into server specs, by name. ${VAR} and
// ${VAR:-default} in commands, arguments, environment values, URLs and headers are expanded
// from getenv, as Claude Code does, so secrets can stay out of the file.
func LoadServersFile(path string, getenv func(string) string) ([]*pb.ServerSpec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("MCP servers file: %w", err)
	}
	if len(data) > maxServersFile {
		return nil, fmt.Errorf("MCP servers file %s is %d bytes; at most %d are allowed", path, len(data), maxServersFile)
	}
	specs, err := ParseServers(data, getenv)
	if err != nil {
		return nil, fmt.Errorf("MCP servers file %s: %w", path, err)
	}
	return specs, nil
}

// ParseServers parses the mcpServers JSON format (the "servers" key of VS Code's mcp.json is
// accepted too).
func ParseServers(data []byte, getenv func(string) string) ([]*pb.ServerSpec, error) {
	var root struct {
		MCPServers map[string]json.RawMessage `json:"mcpServers"`
		Servers    map[string]json.RawMessage `json:"servers"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	entries := root.MCPServers
	if entries == nil {
		entries = root.Servers
	}
	if entries == nil {
		return nil, fmt.Errorf(`no "mcpServers" object`)
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	var specs []*pb.ServerSpec
	seen := map[string]string{}
	var errs []string
	for _, raw := range names {
		var fs fileServer
		if err := json.Unmarshal(entries[raw], &fs); err != nil {
			errs = append(errs, fmt.Sprintf("%q: %v", raw, err))
			continue
		}
		if fs.Disabled {
			continue
		}
		name := CleanName(raw, maxServerName)
		if prev, ok := seen[name]; ok {
			errs = append(errs, fmt.Sprintf("%q and %q both become the server name %q", prev, raw, name))
			continue
		}
		seen[name] = raw
		spec, err := fs.spec(name, getenv)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%q: %v", raw, err))
			continue
		}
		var v rpc.Violations
		ValidateSpec(&v, raw, spec)
		if err := v.Err(); err != nil {
			errs = append(errs, strings.TrimPrefix(err.Error(), "rpc error: code = InvalidArgument desc = "))
			continue
		}
		specs = append(specs, spec)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return specs, nil
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
	switch t := strings.ToLower(fs.Type); {
	case t == "sse":
		return nil, fmt.Errorf(`type "sse" is the deprecated HTTP+SSE transport, which Hermes does not speak; use the server's Streamable HTTP endpoint ("type": "http")`)
	case fs.URL != "" || t == "http" || t == "streamable-http" || t == "streamablehttp":
		if fs.Command != "" {
			return nil, fmt.Errorf("give either command (stdio) or url (Streamable HTTP), not both")
		}
		h := &pb.HTTPTransport{Url: x(fs.URL), BearerTokenEnv: fs.BearerTokenEnv, Headers: map[string]string{}}
		for k, v := range fs.Headers {
			h.Headers[k] = x(v)
		}
		spec.Transport = &pb.ServerSpec_Http{Http: h}
	case t == "" || t == "stdio":
		st := &pb.StdioTransport{Command: x(fs.Command), WorkingDir: x(fs.Cwd), Env: map[string]string{}}
		for _, a := range fs.Args {
			st.Args = append(st.Args, x(a))
		}
		for k, v := range fs.Env {
			st.Env[k] = x(v)
		}
		spec.Transport = &pb.ServerSpec_Stdio{Stdio: st}
	default:
		return nil, fmt.Errorf("unknown type %q (want stdio or http)", fs.Type)
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
