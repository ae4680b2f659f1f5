package mcpgateway

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

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
	g     *Gateway
	calls callMetrics
}

// NewServer returns the gRPC service of g.
func NewServer(g *Gateway) *Server { return &Server{g: g, calls: newCallMetrics()} }

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

// CallTool implements MCPGatewayService. The tool service of the same process calls it
// directly (rpc.LocalUnary), without the gRPC stats handler: its duration is recorded here.
func (s *Server) CallTool(ctx context.Context, req *pb.CallToolRequest) (resp *pb.CallToolResponse, err error) {
	defer s.calls.done(ctx, methodCallTool, time.Now(), &resp, &err)
	if err := validateCall(req); err != nil {
		return nil, err
	}
	return s.g.CallTool(ctx, req)
}

// CallToolStream implements MCPGatewayService.
func (s *Server) CallToolStream(req *pb.CallToolStreamRequest, stream pb.MCPGatewayService_CallToolStreamServer) (err error) {
	var resp *pb.CallToolResponse
	defer s.calls.done(stream.Context(), methodCallToolStream, time.Now(), &resp, &err)
	resp, err = s.callToolStream(req, stream)
	if err != nil {
		return err
	}
	return stream.Send(&pb.CallToolStreamResponse{Event: &pb.CallToolStreamResponse_Response{Response: resp}})
}

// callToolStream runs a streamed call, sending its progress, and returns its result.
func (s *Server) callToolStream(req *pb.CallToolStreamRequest, stream pb.MCPGatewayService_CallToolStreamServer) (*pb.CallToolResponse, error) {
	call := req.GetRequest()
	if call == nil {
		var v rpc.Violations
		v.Add("request", "is required")
		return nil, v.Err()
	}
	if err := validateCall(call); err != nil {
		return nil, err
	}
	// Progress is sent from the goroutine that receives it while the call runs; a stream's Send
	// is not safe for concurrent use, and progress that cannot be sent is dropped, never waited
	// for, so a slow reader cannot hold up the server's connection.
	var mu sync.Mutex // guards stream sends and ended
	ended := false
	resp, err := s.g.CallToolProgress(stream.Context(), call, func(p *pb.Progress) {
		// A request for the caller (elicitation, sampling) is never dropped: the server waits
		// for its answer. They are few (maxElicitPending per server).
		if p.GetElicitation() != nil || p.GetSampling() != nil {
			mu.Lock()
		} else if !mu.TryLock() {
			return
		}
		defer mu.Unlock()
		if !ended {
			_ = stream.Send(&pb.CallToolStreamResponse{Event: &pb.CallToolStreamResponse_Progress{Progress: p}})
		}
	})
	mu.Lock()
	ended = true
	mu.Unlock()
	return resp, err
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
	checkRequestID(&v, req.GetId())
	v.Required("action", req.GetAction())
	v.MaxLen("content", req.GetContent(), maxElicitContent)
	if err := v.Err(); err != nil {
		return nil, err
	}
	// Checked here, so an invalid answer is refused as such on whichever replica it reaches.
	if _, err := parseElicitAnswer(req.GetAction(), req.GetContent()); err != nil {
		return nil, err
	}
	if err := s.g.elicits.answer(ctx, req.GetId(), RelayedAnswer{Kind: kindElicitation, Action: req.GetAction(), Content: req.GetContent()}); err != nil {
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

// Limits of the per-user OAuth RPCs.
const (
	maxUserID     = 256
	maxOAuthState = 128  // the gateway's states are 43 characters
	maxOAuthCode  = 4096 // authorization codes are opaque; providers stay far below
)

// checkServerUser validates the server and user of a per-user connection request.
func checkServerUser(server, user string) error {
	var v rpc.Violations
	v.Required("server", server)
	v.MaxLen("server", server, maxServerName)
	v.Required("user_id", user)
	v.MaxLen("user_id", user, maxUserID)
	return v.Err()
}

// ConnectServer implements MCPGatewayService.
func (s *Server) ConnectServer(ctx context.Context, req *pb.ConnectServerRequest) (*pb.ConnectServerResponse, error) {
	if err := checkServerUser(req.GetServer(), req.GetUserId()); err != nil {
		return nil, err
	}
	if tok := req.GetIdToken(); tok != "" {
		var v rpc.Violations
		v.MaxLen("id_token", tok, maxIDToken)
		if err := v.Err(); err != nil {
			return nil, err
		}
		if err := s.g.ConnectEnterprise(ctx, req.GetServer(), req.GetUserId(), tok); err != nil {
			return nil, err
		}
		return &pb.ConnectServerResponse{Connected: true}, nil
	}
	u, connected, err := s.g.ConnectServer(ctx, req.GetServer(), req.GetUserId())
	if err != nil {
		return nil, err
	}
	return &pb.ConnectServerResponse{AuthorizationUrl: u, Connected: connected}, nil
}

// DisconnectServer implements MCPGatewayService.
func (s *Server) DisconnectServer(ctx context.Context, req *pb.DisconnectServerRequest) (*pb.DisconnectServerResponse, error) {
	if err := checkServerUser(req.GetServer(), req.GetUserId()); err != nil {
		return nil, err
	}
	gone, revoked, err := s.g.DisconnectServer(ctx, req.GetServer(), req.GetUserId())
	if err != nil {
		return nil, err
	}
	return &pb.DisconnectServerResponse{Disconnected: gone, Revoked: revoked}, nil
}

// CompleteAuthorization implements MCPGatewayService.
func (s *Server) CompleteAuthorization(ctx context.Context, req *pb.CompleteAuthorizationRequest) (*pb.CompleteAuthorizationResponse, error) {
	var v rpc.Violations
	v.Required("state", req.GetState())
	v.MaxLen("state", req.GetState(), maxOAuthState)
	v.MaxLen("code", req.GetCode(), maxOAuthCode)
	v.MaxLen("error", req.GetError(), 256)
	v.MaxLen("error_description", req.GetErrorDescription(), 1024)
	v.MaxLen("iss", req.GetIss(), maxURL)
	if err := v.Err(); err != nil {
		return nil, err
	}
	server, err := s.g.CompleteAuthorization(ctx, req)
	if err != nil {
		return nil, err
	}
	return &pb.CompleteAuthorizationResponse{Server: server, Message: "Your account is connected to " + server + ". You can close this page and go back to the conversation."}, nil
}
