package mcpgateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/errclass"
	"github.com/hermes-agent/hermes/internal/rpc"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// Request limits.
const (
	maxCommand        = 4096
	maxArgs           = 256
	maxArg            = 8192
	maxEnv            = 256
	maxEnvValue       = 32 << 10
	maxURL            = 2048
	maxHeaders        = 64
	maxHeaderValue    = 8192
	maxPatterns       = 64
	maxPattern        = 256
	maxGroups         = 16
	maxArguments      = 1 << 20
	maxURI            = 4096
	maxCursor         = 4096
	maxCallTimeout    = 10 * time.Minute // the tool service's largest tool timeout
	maxRoots          = 64
	maxSamplingTokens = 32000
	maxSamplingRate   = 600
)

// Server implements hermes.mcpgateway.v1.MCPGatewayService over a Gateway.
type Server struct {
	pb.UnimplementedMCPGatewayServiceServer
	g *Gateway
}

// NewServer returns the gRPC service of g.
func NewServer(g *Gateway) *Server { return &Server{g: g} }

// ValidateSpec checks a server spec; field paths are prefixed with field.
func ValidateSpec(v *rpc.Violations, field string, s *pb.ServerSpec) {
	if s == nil {
		v.Add(field, "is required")
		return
	}
	switch {
	case s.Name == "":
		v.Add(field+".name", "is required")
	case !serverNameRE.MatchString(s.Name):
		v.Add(field+".name", "must match %s", serverNameRE)
	}
	if s.Prefix != "" && !serverNameRE.MatchString(s.Prefix) {
		v.Add(field+".prefix", "must match %s", serverNameRE)
	}
	switch t := s.Transport.(type) {
	case *pb.ServerSpec_Stdio:
		st := t.Stdio
		switch {
		case st.GetCommand() == "":
			v.Add(field+".stdio.command", "is required")
		case len(st.Command) > maxCommand:
			v.Add(field+".stdio.command", "is longer than %d bytes", maxCommand)
		}
		if len(st.GetArgs()) > maxArgs {
			v.Add(field+".stdio.args", "has %d arguments; at most %d are allowed", len(st.Args), maxArgs)
		}
		for i, a := range st.GetArgs() {
			if len(a) > maxArg || strings.ContainsRune(a, 0) {
				v.Add(fmt.Sprintf("%s.stdio.args[%d]", field, i), "must be at most %d bytes without NUL", maxArg)
			}
		}
		if len(st.GetEnv()) > maxEnv {
			v.Add(field+".stdio.env", "has %d variables; at most %d are allowed", len(st.Env), maxEnv)
		}
		for k, val := range st.GetEnv() {
			if k == "" || strings.ContainsAny(k, "=\x00") || len(val) > maxEnvValue || strings.ContainsRune(val, 0) {
				v.Add(field+".stdio.env["+abbreviate(k, 64)+"]", "needs a name without '=' or NUL and a value of at most %d bytes", maxEnvValue)
			}
		}
		if len(st.GetWorkingDir()) > maxCommand {
			v.Add(field+".stdio.working_dir", "is longer than %d bytes", maxCommand)
		}
	case *pb.ServerSpec_Http:
		ht := t.Http
		u, err := url.Parse(ht.GetUrl())
		switch {
		case ht.GetUrl() == "":
			v.Add(field+".http.url", "is required")
		case len(ht.Url) > maxURL:
			v.Add(field+".http.url", "is longer than %d bytes", maxURL)
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			v.Add(field+".http.url", "must be an absolute http or https URL")
		}
		if len(ht.GetHeaders()) > maxHeaders {
			v.Add(field+".http.headers", "has %d headers; at most %d are allowed", len(ht.Headers), maxHeaders)
		}
		for k, val := range ht.GetHeaders() {
			if k == "" || strings.ContainsAny(k, " :\r\n\x00") || len(val) > maxHeaderValue || strings.ContainsAny(val, "\r\n\x00") {
				v.Add(field+".http.headers["+abbreviate(k, 64)+"]", "needs a header name and a single-line value of at most %d bytes", maxHeaderValue)
			}
		}
		if e := ht.GetBearerTokenEnv(); e != "" && (len(e) > 256 || strings.ContainsAny(e, "=\x00 ")) {
			v.Add(field+".http.bearer_token_env", "must be an environment variable name")
		}
	default:
		v.Add(field+".transport", "set stdio or http")
	}
	for _, p := range []struct {
		name string
		list []string
	}{{"include", s.Include}, {"exclude", s.Exclude}} {
		if len(p.list) > maxPatterns {
			v.Add(field+"."+p.name, "has %d patterns; at most %d are allowed", len(p.list), maxPatterns)
		}
		for i, pat := range p.list {
			if len(pat) > maxPattern {
				v.Add(fmt.Sprintf("%s.%s[%d]", field, p.name, i), "is longer than %d bytes", maxPattern)
			} else if err := validatePatterns([]string{pat}); err != nil {
				v.Add(fmt.Sprintf("%s.%s[%d]", field, p.name, i), "is not a valid glob: %v", err)
			}
		}
	}
	if d := s.GetCallTimeout(); d != nil {
		if err := d.CheckValid(); err != nil || d.AsDuration() <= 0 || d.AsDuration() > maxCallTimeout {
			v.Add(field+".call_timeout", "must be between 0 and %s", maxCallTimeout)
		}
	}
	if s.ProtocolVersion != "" && !slices.Contains(mcp.SupportedProtocolVersions(), s.ProtocolVersion) {
		v.Add(field+".protocol_version", "must be one of %s", strings.Join(mcp.SupportedProtocolVersions(), ", "))
	}
	if len(s.Groups) > maxGroups {
		v.Add(field+".groups", "has %d groups; at most %d are allowed", len(s.Groups), maxGroups)
	}
	for i, gr := range s.Groups {
		if !toolNameRE.MatchString(gr) {
			v.Add(fmt.Sprintf("%s.groups[%d]", field, i), "must match %s", toolNameRE)
		}
	}
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
	if len(s.Roots) > maxRoots {
		v.Add(field+".roots", "has %d roots; at most %d are allowed", len(s.Roots), maxRoots)
	}
	for i, r := range s.Roots {
		u, err := url.Parse(r.GetUri())
		if err != nil || u.Scheme != "file" || len(r.GetUri()) > maxURI || len(r.GetName()) > maxPattern {
			v.Add(fmt.Sprintf("%s.roots[%d]", field, i), "needs a file:// URI of at most %d bytes and a name of at most %d", maxURI, maxPattern)
		}
	}
	if o := s.GetHttp().GetOauth(); o != nil {
		f := field + ".http.oauth"
		u, err := url.Parse(o.GetTokenUrl())
		if o.GetTokenUrl() != "" && (len(o.GetTokenUrl()) > maxURL || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
			v.Add(f+".token_url", "must be an absolute http or https URL of at most %d bytes", maxURL)
		}
		if o.GetClientId() == "" || len(o.GetClientId()) > maxPattern {
			v.Add(f+".client_id", "is required, at most %d bytes", maxPattern)
		}
		if e := o.GetClientSecretEnv(); e == "" || len(e) > 256 || strings.ContainsAny(e, "=\x00 ") {
			v.Add(f+".client_secret_env", "must name an environment variable")
		}
		if len(o.GetScopes()) > maxPatterns {
			v.Add(f+".scopes", "has %d scopes; at most %d are allowed", len(o.Scopes), maxPatterns)
		}
		for i, sc := range o.GetScopes() {
			if sc == "" || len(sc) > maxPattern || strings.ContainsAny(sc, " \"\\\x00") {
				v.Add(fmt.Sprintf("%s.scopes[%d]", f, i), "must be a scope token of at most %d bytes", maxPattern)
			}
		}
		switch o.GetAuthMethod() {
		case "", "client_secret_basic", "client_secret_post":
		default:
			v.Add(f+".auth_method", `must be "client_secret_basic" or "client_secret_post"`)
		}
	}
}

// checkSpec is the one check every server spec passes wherever it enters the gateway:
// AddServer, the servers file, and specs read back from the shared store.
func checkSpec(field string, spec *pb.ServerSpec) error {
	var v rpc.Violations
	ValidateSpec(&v, field, spec)
	if err := v.Err(); err != nil {
		return errclass.Errorf(errclass.Invalid, "%s", status.Convert(err).Message())
	}
	return nil
}

// AddServer implements MCPGatewayService.
func (s *Server) AddServer(ctx context.Context, req *pb.AddServerRequest) (*pb.AddServerResponse, error) {
	var v rpc.Violations
	ValidateSpec(&v, "spec", req.GetSpec())
	if err := v.Err(); err != nil {
		return nil, err
	}
	srv, err := s.g.AddServer(ctx, req.GetSpec(), req.GetWait())
	if err != nil {
		return nil, err
	}
	return &pb.AddServerResponse{Server: srv}, nil
}

// RemoveServer implements MCPGatewayService.
func (s *Server) RemoveServer(ctx context.Context, req *pb.RemoveServerRequest) (*pb.RemoveServerResponse, error) {
	var v rpc.Violations
	v.Required("name", req.GetName())
	v.MaxLen("name", req.GetName(), maxServerName)
	if err := v.Err(); err != nil {
		return nil, err
	}
	n, err := s.g.RemoveServer(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	return &pb.RemoveServerResponse{RemovedTools: int32(n)}, nil
}

// ListServers implements MCPGatewayService.
func (s *Server) ListServers(context.Context, *pb.ListServersRequest) (*pb.ListServersResponse, error) {
	return &pb.ListServersResponse{Servers: s.g.Servers()}, nil
}

// ListTools implements MCPGatewayService.
func (s *Server) ListTools(_ context.Context, req *pb.ListToolsRequest) (*pb.ListToolsResponse, error) {
	var v rpc.Violations
	v.MaxLen("server", req.GetServer(), maxServerName)
	if err := v.Err(); err != nil {
		return nil, err
	}
	tools, err := s.g.Tools(req.GetServer())
	if err != nil {
		return nil, err
	}
	return &pb.ListToolsResponse{Tools: tools}, nil
}

// CallTool implements MCPGatewayService.
func (s *Server) CallTool(ctx context.Context, req *pb.CallToolRequest) (*pb.CallToolResponse, error) {
	if err := validateCall(req); err != nil {
		return nil, err
	}
	resp, err := s.g.CallTool(ctx, req)
	return resp, err
}

// CallToolStream implements MCPGatewayService.
func (s *Server) CallToolStream(req *pb.CallToolStreamRequest, stream pb.MCPGatewayService_CallToolStreamServer) error {
	call := req.GetRequest()
	if call == nil {
		var v rpc.Violations
		v.Add("request", "is required")
		return v.Err()
	}
	if err := validateCall(call); err != nil {
		return err
	}
	// Progress is sent from the goroutine that receives it while the call runs; a stream's Send
	// is not safe for concurrent use, and progress that cannot be sent is dropped, never waited
	// for, so a slow reader cannot hold up the server's connection.
	var mu sync.Mutex // guards stream sends and ended
	ended := false
	resp, err := s.g.CallToolProgress(stream.Context(), call, func(p *pb.Progress) {
		if !mu.TryLock() {
			return
		}
		defer mu.Unlock()
		if !ended {
			_ = stream.Send(&pb.CallToolStreamResponse{Event: &pb.CallToolStreamResponse_Progress{Progress: p}})
		}
	})
	mu.Lock()
	defer mu.Unlock()
	ended = true
	if err != nil {
		return err
	}
	return stream.Send(&pb.CallToolStreamResponse{Event: &pb.CallToolStreamResponse_Response{Response: resp}})
}

// validateCall checks a CallToolRequest.
func validateCall(req *pb.CallToolRequest) error {
	var v rpc.Violations
	switch {
	case req.GetName() != "":
		v.MaxLen("name", req.GetName(), maxToolName)
		if req.GetServer() != "" || req.GetTool() != "" {
			v.Add("name", "give either name, or server and tool")
		}
	case req.GetServer() == "" || req.GetTool() == "":
		v.Add("name", "is required (or server and tool)")
	default:
		v.MaxLen("server", req.GetServer(), maxServerName)
		v.MaxLen("tool", req.GetTool(), 1024)
	}
	if a := strings.TrimSpace(req.GetArguments()); a != "" {
		if len(a) > maxArguments {
			v.Add("arguments", "is %d bytes; at most %d are allowed", len(a), maxArguments)
		} else if !json.Valid([]byte(a)) || a[0] != '{' {
			v.Add("arguments", "must be a JSON object")
		}
	}
	if d := req.GetTimeout(); d != nil {
		if err := d.CheckValid(); err != nil || d.AsDuration() < 0 {
			v.Add("timeout", "must be a non-negative duration")
		}
	}
	if n := req.GetMaxOutputBytes(); n < 0 || n > maxRequestedOutput {
		v.Add("max_output_bytes", "must be between 0 and %d", maxRequestedOutput)
	}
	return v.Err()
}

// validateValues limits a map of argument values (a prompt's arguments, a completion's context).
func validateValues(v *rpc.Violations, field string, m map[string]string) {
	if len(m) > 64 {
		v.Add(field, "has %d entries; at most 64 are allowed", len(m))
	}
	for k, val := range m {
		if len(k) > 256 || len(val) > 64<<10 {
			v.Add(field+"["+abbreviate(k, 64)+"]", "name at most 256 bytes, value at most 64 KiB")
		}
	}
}

func validateServerCursor(v *rpc.Violations, server, cursor string) {
	v.Required("server", server)
	v.MaxLen("server", server, maxServerName)
	v.MaxLen("cursor", cursor, maxCursor)
}

// ListResources implements MCPGatewayService.
func (s *Server) ListResources(ctx context.Context, req *pb.ListResourcesRequest) (*pb.ListResourcesResponse, error) {
	var v rpc.Violations
	validateServerCursor(&v, req.GetServer(), req.GetCursor())
	if err := v.Err(); err != nil {
		return nil, err
	}
	resp, err := s.g.ListResources(ctx, req.GetServer(), req.GetCursor())
	return resp, err
}

// ReadResource implements MCPGatewayService.
func (s *Server) ReadResource(ctx context.Context, req *pb.ReadResourceRequest) (*pb.ReadResourceResponse, error) {
	var v rpc.Violations
	v.Required("server", req.GetServer())
	v.MaxLen("server", req.GetServer(), maxServerName)
	v.Required("uri", req.GetUri())
	v.MaxLen("uri", req.GetUri(), maxURI)
	if err := v.Err(); err != nil {
		return nil, err
	}
	resp, err := s.g.ReadResource(ctx, req.GetServer(), req.GetUri())
	return resp, err
}

// ListPrompts implements MCPGatewayService.
func (s *Server) ListPrompts(ctx context.Context, req *pb.ListPromptsRequest) (*pb.ListPromptsResponse, error) {
	var v rpc.Violations
	validateServerCursor(&v, req.GetServer(), req.GetCursor())
	if err := v.Err(); err != nil {
		return nil, err
	}
	resp, err := s.g.ListPrompts(ctx, req.GetServer(), req.GetCursor())
	return resp, err
}

// GetPrompt implements MCPGatewayService.
func (s *Server) GetPrompt(ctx context.Context, req *pb.GetPromptRequest) (*pb.GetPromptResponse, error) {
	var v rpc.Violations
	v.Required("server", req.GetServer())
	v.MaxLen("server", req.GetServer(), maxServerName)
	v.Required("name", req.GetName())
	v.MaxLen("name", req.GetName(), 1024)
	validateValues(&v, "arguments", req.GetArguments())
	if err := v.Err(); err != nil {
		return nil, err
	}
	resp, err := s.g.GetPrompt(ctx, req.GetServer(), req.GetName(), req.GetArguments())
	return resp, err
}

// ListResourceTemplates implements MCPGatewayService.
func (s *Server) ListResourceTemplates(ctx context.Context, req *pb.ListResourceTemplatesRequest) (*pb.ListResourceTemplatesResponse, error) {
	var v rpc.Violations
	validateServerCursor(&v, req.GetServer(), req.GetCursor())
	if err := v.Err(); err != nil {
		return nil, err
	}
	resp, err := s.g.ListResourceTemplates(ctx, req.GetServer(), req.GetCursor())
	return resp, err
}

// WatchResource implements MCPGatewayService.
func (s *Server) WatchResource(req *pb.WatchResourceRequest, stream pb.MCPGatewayService_WatchResourceServer) error {
	var v rpc.Violations
	v.Required("server", req.GetServer())
	v.MaxLen("server", req.GetServer(), maxServerName)
	v.Required("uri", req.GetUri())
	v.MaxLen("uri", req.GetUri(), maxURI)
	if err := v.Err(); err != nil {
		return err
	}
	err := s.g.WatchResource(stream.Context(), req.GetServer(), req.GetUri(), func(updated bool) error {
		return stream.Send(&pb.WatchResourceResponse{Uri: req.GetUri(), Updated: updated})
	})
	return err
}

// AnswerElicitation implements MCPGatewayService.
func (s *Server) AnswerElicitation(ctx context.Context, req *pb.AnswerElicitationRequest) (*pb.AnswerElicitationResponse, error) {
	var v rpc.Violations
	v.Required("id", req.GetId())
	v.MaxLen("id", req.GetId(), 64)
	v.Required("action", req.GetAction())
	v.MaxLen("content", req.GetContent(), maxElicitContent)
	if err := v.Err(); err != nil {
		return nil, err
	}
	if err := s.g.elicits.answer(ctx, req.GetId(), req.GetAction(), req.GetContent()); err != nil {
		return nil, err
	}
	return &pb.AnswerElicitationResponse{}, nil
}

// Complete implements MCPGatewayService.
func (s *Server) Complete(ctx context.Context, req *pb.CompleteRequest) (*pb.CompleteResponse, error) {
	var v rpc.Violations
	v.Required("server", req.GetServer())
	v.MaxLen("server", req.GetServer(), maxServerName)
	switch {
	case req.GetPrompt() != "":
		v.MaxLen("prompt", req.GetPrompt(), 1024)
	case req.GetResourceTemplate() != "":
		v.MaxLen("resource_template", req.GetResourceTemplate(), maxURI)
	default:
		v.Add("ref", "set prompt or resource_template")
	}
	v.Required("argument", req.GetArgument())
	v.MaxLen("argument", req.GetArgument(), 256)
	v.MaxLen("value", req.GetValue(), 64<<10)
	validateValues(&v, "context", req.GetContext())
	if err := v.Err(); err != nil {
		return nil, err
	}
	resp, err := s.g.Complete(ctx, req)
	return resp, err
}
