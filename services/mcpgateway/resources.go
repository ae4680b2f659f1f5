package mcpgateway

import (
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"

	"context"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// session returns a server's session for resources and prompts, checking that the server
// declares the capability.
func (g *Gateway) session(name string, capability func(*mcp.ServerCapabilities) bool, what string) (*mcp.ClientSession, error) {
	c, err := g.server(name)
	if err != nil {
		return nil, err
	}
	sess, why := c.readySession()
	if sess == nil {
		return nil, fmt.Errorf("%w: MCP server %q is not connected (%s); try again shortly", errUnavailable, name, why)
	}
	caps := sess.InitializeResult().Capabilities
	if caps == nil || !capability(caps) {
		return nil, fmt.Errorf("%w: MCP server %q does not declare %s", errPrecondition, name, what)
	}
	return sess, nil
}

func hasResources(c *mcp.ServerCapabilities) bool { return c.Resources != nil }

func hasPrompts(c *mcp.ServerCapabilities) bool { return c.Prompts != nil }

// callErr maps an MCP request failure (not a tool call) to an error for the gRPC boundary.
func (g *Gateway) callErr(ctx context.Context, server string, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	var rpcErr *jsonrpc.Error
	if errors.As(err, &rpcErr) && !errors.Is(err, mcp.ErrConnectionClosed) {
		// Servers answer an unknown resource or prompt with -32602 (invalid params, SEP-2164).
		code := codes.FailedPrecondition
		if rpcErr.Code == jsonrpc.CodeInvalidParams {
			code = codes.NotFound
		}
		return status.Errorf(code, "MCP server %q: %s", server, abbreviate(rpcErr.Message, 2000))
	}
	if c, cerr := g.server(server); cerr == nil {
		c.requestProbe()
	}
	return status.Errorf(codes.Unavailable, "MCP server %q: %s", server, abbreviate(err.Error(), 500))
}

// ListResources lists a server's resources.
func (g *Gateway) ListResources(ctx context.Context, server, cursor string) (*pb.ListResourcesResponse, error) {
	sess, err := g.session(server, hasResources, "resources")
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, g.cfg.CallTimeout)
	defer cancel()
	res, err := sess.ListResources(cctx, &mcp.ListResourcesParams{Cursor: cursor})
	if err != nil {
		return nil, g.callErr(ctx, server, err)
	}
	out := &pb.ListResourcesResponse{NextCursor: res.NextCursor}
	plain := CleanOptions{MaxBytes: 2048, CompactJSONOver: -1}
	for _, r := range res.Resources {
		out.Resources = append(out.Resources, &pb.Resource{
			Uri:         r.URI,
			Name:        CleanText(r.Name, "text/plain", plain).Text,
			Description: CleanText(r.Description, "text/plain", plain).Text,
			MimeType:    r.MIMEType,
			Size:        r.Size,
		})
	}
	return out, nil
}

// ReadResource reads a resource, cleaning its text.
func (g *Gateway) ReadResource(ctx context.Context, server, uri string) (*pb.ReadResourceResponse, error) {
	sess, err := g.session(server, hasResources, "resources")
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, g.cfg.CallTimeout)
	defer cancel()
	res, err := sess.ReadResource(cctx, &mcp.ReadResourceParams{URI: uri})
	if err != nil {
		return nil, g.callErr(ctx, server, err)
	}
	out := &pb.ReadResourceResponse{}
	for _, rc := range res.Contents {
		if rc == nil {
			continue
		}
		c := &pb.ResourceContent{Uri: rc.URI, MimeType: rc.MIMEType}
		if rc.Blob != nil {
			c.BlobSize = int64(len(rc.Blob))
			c.Text = describeContent(&pb.Content{Type: "blob", Uri: rc.URI, MimeType: rc.MIMEType, Size: c.BlobSize})
		} else {
			cl := CleanText(rc.Text, rc.MIMEType, g.cfg.cleanOptions())
			c.Text, c.Truncated, c.RemovedChars = cl.Text, cl.Truncated, cl.Removed
		}
		out.Contents = append(out.Contents, c)
	}
	return out, nil
}

// ListPrompts lists a server's prompts.
func (g *Gateway) ListPrompts(ctx context.Context, server, cursor string) (*pb.ListPromptsResponse, error) {
	sess, err := g.session(server, hasPrompts, "prompts")
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, g.cfg.CallTimeout)
	defer cancel()
	res, err := sess.ListPrompts(cctx, &mcp.ListPromptsParams{Cursor: cursor})
	if err != nil {
		return nil, g.callErr(ctx, server, err)
	}
	plain := CleanOptions{MaxBytes: 2048, CompactJSONOver: -1}
	out := &pb.ListPromptsResponse{NextCursor: res.NextCursor}
	for _, p := range res.Prompts {
		pp := &pb.Prompt{Name: p.Name, Description: CleanText(p.Description, "text/plain", plain).Text}
		for _, a := range p.Arguments {
			pp.Arguments = append(pp.Arguments, &pb.PromptArgument{Name: a.Name, Description: CleanText(a.Description, "text/plain", plain).Text, Required: a.Required})
		}
		out.Prompts = append(out.Prompts, pp)
	}
	return out, nil
}

// GetPrompt renders a prompt, cleaning its messages.
func (g *Gateway) GetPrompt(ctx context.Context, server, name string, args map[string]string) (*pb.GetPromptResponse, error) {
	sess, err := g.session(server, hasPrompts, "prompts")
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, g.cfg.CallTimeout)
	defer cancel()
	res, err := sess.GetPrompt(cctx, &mcp.GetPromptParams{Name: name, Arguments: args})
	if err != nil {
		return nil, g.callErr(ctx, server, err)
	}
	opts := g.cfg.cleanOptions()
	out := &pb.GetPromptResponse{Description: CleanText(res.Description, "text/plain", CleanOptions{MaxBytes: 2048, CompactJSONOver: -1}).Text}
	for _, m := range res.Messages {
		if m == nil {
			continue
		}
		var text string
		switch v := m.Content.(type) {
		case *mcp.TextContent:
			text = CleanText(v.Text, "", opts).Text
		default:
			r := normalizeResult(&mcp.CallToolResult{Content: []mcp.Content{m.Content}}, nil, opts)
			for _, d := range r.Contents {
				text = describeContent(d)
			}
		}
		out.Messages = append(out.Messages, &pb.PromptMessage{Role: string(m.Role), Text: text})
	}
	return out, nil
}
