package mcpgateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/errclass"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// codeResourceNotFound is MCP's error code for an unknown resource.
const codeResourceNotFound = -32002

// maxCompletions caps the values Complete returns (MCP's own cap).
const maxCompletions = 100

// capability names a server capability that a request needs.
type capability struct {
	what string
	has  func(*mcp.ServerCapabilities) bool
}

var (
	capResources   = capability{"resources", func(c *mcp.ServerCapabilities) bool { return c.Resources != nil }}
	capPrompts     = capability{"prompts", func(c *mcp.ServerCapabilities) bool { return c.Prompts != nil }}
	capSubscribe   = capability{"resource subscriptions", func(c *mcp.ServerCapabilities) bool { return c.Resources != nil && c.Resources.Subscribe }}
	capCompletions = capability{"completions", func(c *mcp.ServerCapabilities) bool { return c.Completions != nil }}
)

// request runs one MCP request that is not a tool call on a server that declares the capability
// it needs, within the call timeout, and classifies its failure for the gRPC boundary.
func request[T any](ctx context.Context, g *Gateway, server string, cap capability, do func(context.Context, *mcp.ClientSession) (T, error)) (T, error) {
	var zero T
	c, err := g.server(server)
	if err != nil {
		return zero, err
	}
	if perUserOAuth(c.spec.GetHttp()) {
		// The shared session holds a connected user's token: what it reads is that user's.
		return zero, errclass.Errorf(errclass.Precondition, "MCP server %q is called with each user's own account; its %s are not served to everyone", server, cap.what)
	}
	l, why := c.waitReady(ctx, min(g.cfg.ReadyWait, g.cfg.CallTimeout/2))
	if l == nil {
		if ctx.Err() != nil {
			return zero, status.FromContextError(ctx.Err()).Err()
		}
		return zero, errclass.Errorf(errclass.Unavailable, "MCP server %q is not connected (%s); try again shortly", server, why)
	}
	caps := l.sess.InitializeResult().Capabilities
	if caps == nil || !cap.has(caps) {
		return zero, errclass.Errorf(errclass.Precondition, "MCP server %q does not declare %s", server, cap.what)
	}
	cctx, cancel := context.WithTimeout(ctx, g.cfg.CallTimeout)
	defer cancel()
	res, err := do(cctx, l.sess)
	if err != nil {
		return zero, g.requestErr(ctx, c, err)
	}
	return res, nil
}

// requestErr classifies a failed MCP request (not a tool call): the server's JSON-RPC error by
// its code, anything else as the connection failing.
func (g *Gateway) requestErr(ctx context.Context, c *serverConn, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	var rpcErr *jsonrpc.Error
	if errors.As(err, &rpcErr) && !errors.Is(err, mcp.ErrConnectionClosed) {
		msg := fmt.Sprintf("MCP server %q: %s", c.spec.Name, abbreviate(rpcErr.Message, 2000))
		switch {
		case rpcErr.Code == codeResourceNotFound:
			return errclass.Errorf(errclass.NotFound, "%s", msg)
		// Servers answer an unknown resource or prompt, and a missing or wrong argument, with
		// -32602 (invalid params); only the message tells them apart.
		case rpcErr.Code == jsonrpc.CodeInvalidParams && isNotFoundMessage(rpcErr.Message):
			return errclass.Errorf(errclass.NotFound, "%s", msg)
		case rpcErr.Code == jsonrpc.CodeInvalidParams:
			return errclass.Errorf(errclass.Invalid, "%s", msg)
		default:
			return errclass.Errorf(errclass.Precondition, "%s", msg)
		}
	}
	c.requestProbe()
	return errclass.Errorf(errclass.Unavailable, "MCP server %q: %s", c.spec.Name, abbreviate(err.Error(), 500))
}

func isNotFoundMessage(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "not found") || strings.Contains(m, "unknown prompt") || strings.Contains(m, "unknown resource") || strings.Contains(m, "no such")
}

// plainOptions clean names and descriptions.
var plainOptions = CleanOptions{MaxBytes: 2048, CompactJSONOver: -1}

func plain(s string) string { return CleanText(s, "text/plain", plainOptions).Text }

// ListResources lists a server's resources.
func (g *Gateway) ListResources(ctx context.Context, server, cursor string) (*pb.ListResourcesResponse, error) {
	return request(ctx, g, server, capResources, func(ctx context.Context, sess *mcp.ClientSession) (*pb.ListResourcesResponse, error) {
		res, err := sess.ListResources(ctx, &mcp.ListResourcesParams{Cursor: cursor})
		if err != nil {
			return nil, err
		}
		out := &pb.ListResourcesResponse{NextCursor: res.NextCursor}
		for _, r := range res.Resources {
			out.Resources = append(out.Resources, &pb.Resource{Uri: r.URI, Name: plain(r.Name), Description: plain(r.Description), MimeType: r.MIMEType, Size: r.Size})
		}
		return out, nil
	})
}

// ListResourceTemplates lists a server's resource templates.
func (g *Gateway) ListResourceTemplates(ctx context.Context, server, cursor string) (*pb.ListResourceTemplatesResponse, error) {
	return request(ctx, g, server, capResources, func(ctx context.Context, sess *mcp.ClientSession) (*pb.ListResourceTemplatesResponse, error) {
		res, err := sess.ListResourceTemplates(ctx, &mcp.ListResourceTemplatesParams{Cursor: cursor})
		if err != nil {
			return nil, err
		}
		out := &pb.ListResourceTemplatesResponse{NextCursor: res.NextCursor}
		for _, t := range res.ResourceTemplates {
			out.Templates = append(out.Templates, &pb.ResourceTemplate{UriTemplate: t.URITemplate, Name: plain(t.Name), Description: plain(t.Description), MimeType: t.MIMEType})
		}
		return out, nil
	})
}

// ReadResource reads a resource, cleaning its text.
func (g *Gateway) ReadResource(ctx context.Context, server, uri string) (*pb.ReadResourceResponse, error) {
	return request(ctx, g, server, capResources, func(ctx context.Context, sess *mcp.ClientSession) (*pb.ReadResourceResponse, error) {
		res, err := sess.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
		if err != nil {
			return nil, err
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
	})
}

// ListPrompts lists a server's prompts.
func (g *Gateway) ListPrompts(ctx context.Context, server, cursor string) (*pb.ListPromptsResponse, error) {
	return request(ctx, g, server, capPrompts, func(ctx context.Context, sess *mcp.ClientSession) (*pb.ListPromptsResponse, error) {
		res, err := sess.ListPrompts(ctx, &mcp.ListPromptsParams{Cursor: cursor})
		if err != nil {
			return nil, err
		}
		out := &pb.ListPromptsResponse{NextCursor: res.NextCursor}
		for _, p := range res.Prompts {
			pp := &pb.Prompt{Name: p.Name, Description: plain(p.Description)}
			for _, a := range p.Arguments {
				pp.Arguments = append(pp.Arguments, &pb.PromptArgument{Name: a.Name, Description: plain(a.Description), Required: a.Required})
			}
			out.Prompts = append(out.Prompts, pp)
		}
		return out, nil
	})
}

// GetPrompt renders a prompt, cleaning its messages.
func (g *Gateway) GetPrompt(ctx context.Context, server, name string, args map[string]string) (*pb.GetPromptResponse, error) {
	return request(ctx, g, server, capPrompts, func(ctx context.Context, sess *mcp.ClientSession) (*pb.GetPromptResponse, error) {
		res, err := sess.GetPrompt(ctx, &mcp.GetPromptParams{Name: name, Arguments: args})
		if err != nil {
			return nil, err
		}
		opts := g.cfg.cleanOptions()
		out := &pb.GetPromptResponse{Description: plain(res.Description)}
		for _, m := range res.Messages {
			if m == nil {
				continue
			}
			var text string
			switch v := m.Content.(type) {
			case *mcp.TextContent:
				text = CleanText(v.Text, "", opts).Text
			default:
				r := normalizeResult(&mcp.CallToolResult{Content: []mcp.Content{m.Content}}, nil, opts, mediaCaps{})
				for _, d := range r.Contents {
					text = describeContent(d)
				}
			}
			out.Messages = append(out.Messages, &pb.PromptMessage{Role: string(m.Role), Text: text})
		}
		return out, nil
	})
}

// Complete asks a server for completions of an argument.
func (g *Gateway) Complete(ctx context.Context, req *pb.CompleteRequest) (*pb.CompleteResponse, error) {
	return request(ctx, g, req.GetServer(), capCompletions, func(ctx context.Context, sess *mcp.ClientSession) (*pb.CompleteResponse, error) {
		ref := &mcp.CompleteReference{Type: "ref/prompt", Name: req.GetPrompt()}
		if req.GetResourceTemplate() != "" {
			ref = &mcp.CompleteReference{Type: "ref/resource", URI: req.GetResourceTemplate()}
		}
		params := &mcp.CompleteParams{Ref: ref, Argument: mcp.CompleteParamsArgument{Name: req.GetArgument(), Value: req.GetValue()}}
		if len(req.GetContext()) > 0 {
			params.Context = &mcp.CompleteContext{Arguments: req.GetContext()}
		}
		res, err := sess.Complete(ctx, params)
		if err != nil {
			return nil, err
		}
		out := &pb.CompleteResponse{Total: int32(min(res.Completion.Total, 1<<31-1)), HasMore: res.Completion.HasMore}
		for i, v := range res.Completion.Values {
			if i == maxCompletions {
				out.HasMore = true
				break
			}
			out.Values = append(out.Values, CleanText(v, "text/plain", CleanOptions{MaxBytes: 1024, CompactJSONOver: -1}).Text)
		}
		return out, nil
	})
}

// WatchResource subscribes to a resource and calls onUpdate (first with updated=false once the
// subscription is in place, then each time the server reports the resource updated) until ctx
// ends; then it unsubscribes. Several watchers of one resource share one subscription.
func (g *Gateway) WatchResource(ctx context.Context, server, uri string, onUpdate func(updated bool) error) error {
	c, err := g.server(server)
	if err != nil {
		return err
	}
	updates := make(chan struct{}, 1)
	first, release := g.watches.add(c, uri, updates)
	defer func() {
		if last := release(); last {
			if sess := c.session(); sess != nil {
				uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.PingTimeout)
				_ = sess.Unsubscribe(uctx, &mcp.UnsubscribeParams{URI: uri})
				cancel()
			}
		}
	}()
	if first {
		acked, stopAck := g.watches.awaitAck(c, uri)
		defer stopAck()
		var stateless bool
		if _, err := request(ctx, g, server, capSubscribe, func(ctx context.Context, sess *mcp.ClientSession) (struct{}, error) {
			stateless = statelessProtocol(sess)
			return struct{}{}, sess.Subscribe(ctx, &mcp.SubscribeParams{URI: uri})
		}); err != nil {
			return err
		}
		// Under 2026-07-28, Subscribe only sends subscriptions/listen: the subscription exists
		// once the server acknowledges it, and an update before that would be lost. The
		// confirmation waits for the acknowledgement (bounded: a server that never sends one
		// gets the watch anyway).
		if stateless {
			select {
			case <-acked:
			case <-ctx.Done():
				return nil
			case <-time.After(g.cfg.PingTimeout):
				g.log.Warn("MCP server did not acknowledge a resource subscription; watching anyway", "server", server, "uri", uri)
			}
		}
	}
	if err := onUpdate(false); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.ctx.Done():
			return errclass.Errorf(errclass.Unavailable, "MCP server %q was removed", server)
		case <-updates:
			if err := onUpdate(true); err != nil {
				return err
			}
		}
	}
}

// watchHub holds the resource watchers of every server, and the watchers waiting for a
// server's acknowledgement of a subscription (notifications/subscriptions/acknowledged).
type watchHub struct {
	mu       sync.Mutex // guards watchers and acks
	watchers map[watchKey][]chan struct{}
	acks     map[watchKey][]chan struct{}
}

type watchKey struct {
	conn *serverConn
	uri  string
}

func newWatchHub() *watchHub {
	return &watchHub{watchers: map[watchKey][]chan struct{}{}, acks: map[watchKey][]chan struct{}{}}
}

// awaitAck returns a channel that is closed when the server acknowledges a subscription to
// uri, and a function that stops waiting.
func (h *watchHub) awaitAck(c *serverConn, uri string) (<-chan struct{}, func()) {
	k := watchKey{c, uri}
	ch := make(chan struct{})
	h.mu.Lock()
	h.acks[k] = append(h.acks[k], ch)
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		removeChan(h.acks, k, ch)
	}
}

// removeChan removes ch from m[k], deleting the key when none is left, and reports whether none
// is; the caller holds the hub's mu.
func removeChan(m map[watchKey][]chan struct{}, k watchKey, ch chan struct{}) bool {
	list := m[k]
	if i := slices.Index(list, ch); i >= 0 {
		list = slices.Delete(list, i, i+1)
	}
	if len(list) == 0 {
		delete(m, k)
		return true
	}
	m[k] = list
	return false
}

// acked wakes the waiters for the acknowledged subscriptions to uris, once each.
func (h *watchHub) acked(c *serverConn, uris []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, uri := range uris {
		k := watchKey{c, uri}
		for _, ch := range h.acks[k] {
			close(ch)
		}
		delete(h.acks, k)
	}
}

// add registers a watcher; first reports whether it is the resource's first (which
// subscribes), and release removes it, reporting whether it was the last (which unsubscribes).
func (h *watchHub) add(c *serverConn, uri string, ch chan struct{}) (first bool, release func() bool) {
	k := watchKey{c, uri}
	h.mu.Lock()
	first = len(h.watchers[k]) == 0
	h.watchers[k] = append(h.watchers[k], ch)
	h.mu.Unlock()
	return first, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return removeChan(h.watchers, k, ch)
	}
}

// updated wakes the watchers of a resource (notifications/resources/updated).
func (h *watchHub) updated(c *serverConn, uri string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ch := range h.watchers[watchKey{c, uri}] {
		notify(ch)
	}
}
