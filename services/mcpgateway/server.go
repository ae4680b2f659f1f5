package mcpgateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/rpc"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// Request limits.
const (
	maxCommand     = 4096
	maxArgs        = 256
	maxArg         = 8192
	maxEnv         = 256
	maxEnvValue    = 32 << 10
	maxURL         = 2048
	maxHeaders     = 64
	maxHeaderValue = 8192
	maxPatterns    = 64
	maxPattern     = 256
	maxGroups      = 16
	maxArguments   = 1 << 20
	maxURI         = 4096
	maxCursor      = 4096
	maxCallTimeout = 10 * time.Minute // the tool service's largest tool timeout
)

// Server implements hermes.mcpgateway.v1.MCPGatewayService over a Gateway.
type Server struct {
	pb.UnimplementedMCPGatewayServiceServer
	g *Gateway
}

// NewServer returns the gRPC service of g.
func NewServer(g *Gateway) *Server { return &Server{g: g} }

// toStatus maps gateway errors to gRPC codes; errors that already are statuses pass through.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Internal
	switch {
	case errors.Is(err, errNotFound):
		code = codes.NotFound
	case errors.Is(err, errAlreadyExists):
		code = codes.AlreadyExists
	case errors.Is(err, errExhausted):
		code = codes.ResourceExhausted
	case errors.Is(err, errUnavailable):
		code = codes.Unavailable
	case errors.Is(err, errPrecondition):
		code = codes.FailedPrecondition
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	}
	return status.Error(code, err.Error())
}

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
		return nil, toStatus(err)
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
		return nil, toStatus(err)
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
		return nil, toStatus(err)
	}
	return &pb.ListToolsResponse{Tools: tools}, nil
}

// CallTool implements MCPGatewayService.
func (s *Server) CallTool(ctx context.Context, req *pb.CallToolRequest) (*pb.CallToolResponse, error) {
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
	if err := v.Err(); err != nil {
		return nil, err
	}
	resp, err := s.g.CallTool(ctx, req)
	return resp, toStatus(err)
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
	return resp, toStatus(err)
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
	return resp, toStatus(err)
}

// ListPrompts implements MCPGatewayService.
func (s *Server) ListPrompts(ctx context.Context, req *pb.ListPromptsRequest) (*pb.ListPromptsResponse, error) {
	var v rpc.Violations
	validateServerCursor(&v, req.GetServer(), req.GetCursor())
	if err := v.Err(); err != nil {
		return nil, err
	}
	resp, err := s.g.ListPrompts(ctx, req.GetServer(), req.GetCursor())
	return resp, toStatus(err)
}

// GetPrompt implements MCPGatewayService.
func (s *Server) GetPrompt(ctx context.Context, req *pb.GetPromptRequest) (*pb.GetPromptResponse, error) {
	var v rpc.Violations
	v.Required("server", req.GetServer())
	v.MaxLen("server", req.GetServer(), maxServerName)
	v.Required("name", req.GetName())
	v.MaxLen("name", req.GetName(), 1024)
	if len(req.GetArguments()) > 64 {
		v.Add("arguments", "has %d entries; at most 64 are allowed", len(req.Arguments))
	}
	for k, val := range req.GetArguments() {
		if len(k) > 256 || len(val) > 64<<10 {
			v.Add("arguments["+abbreviate(k, 64)+"]", "name at most 256 bytes, value at most 64 KiB")
		}
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	resp, err := s.g.GetPrompt(ctx, req.GetServer(), req.GetName(), req.GetArguments())
	return resp, toStatus(err)
}
