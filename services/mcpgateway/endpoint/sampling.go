package endpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hermes-agent/hermes/internal/errclass"
	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// Answers is what the endpoint needs of the MCP gateway: passing its clients' answers to the
// requests an MCP server behind the gateway makes while one of its tools runs.
type Answers interface {
	AnswerSampling(ctx context.Context, in *mcpgatewayv1.AnswerSamplingRequest, opts ...grpc.CallOption) (*mcpgatewayv1.AnswerSamplingResponse, error)
	AnswerElicitation(ctx context.Context, in *mcpgatewayv1.AnswerElicitationRequest, opts ...grpc.CallOption) (*mcpgatewayv1.AnswerElicitationResponse, error)
}

// Limits of what the endpoint passes from its client to the gateway (the gateway refuses more).
const (
	maxSampledText   = 64 << 10
	maxSampledModel  = 256
	maxSampledError  = 1 << 10
	maxElicitContent = 64 << 10
	// answerTimeout bounds one AnswerSampling or AnswerElicitation call.
	answerTimeout = 10 * time.Second
)

// samplingClient reports whether the client of req declared the sampling capability, and the
// gateway to answer through when it did (nil: the call is not streamed).
func (s *Server) samplingClient(req *mcp.CallToolRequest) Answers {
	if s.opts.Gateway == nil || req.Session == nil {
		return nil
	}
	ip := req.Session.InitializeParams()
	if ip == nil || ip.Capabilities == nil || ip.Capabilities.Sampling == nil {
		return nil
	}
	gw, err := s.opts.Gateway()
	if err != nil {
		s.log.Debug("MCP endpoint: the MCP gateway is unreachable; the client is not asked for completions", "error", err)
		return nil
	}
	return gw
}

// executeAsking runs a call through ExecuteToolStream for a client that answers sampling: an
// MCP server behind the gateway whose spec sets sampling.ask_caller sends its sampling requests
// to this client (sampling/createMessage on the call's stream), and the client's answer goes
// back through the gateway's AnswerSampling. A server's request for user input ("ask" mode)
// reaches the client as elicitation/create when it declared elicitation, and is declined at
// once otherwise, so the call does not wait for an answer that cannot come.
func (s *Server) executeAsking(ctx context.Context, c ToolClient, req *mcp.CallToolRequest, in *toolsv1.ExecuteToolRequest, gw Answers) (*toolsv1.ExecuteToolResponse, error) {
	in.AnswersSampling = true
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.ExecuteToolStream(ctx, &toolsv1.ExecuteToolStreamRequest{Request: in})
	if err != nil {
		return nil, err
	}
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil, errclass.New(errclass.Unavailable, "the tool service ended the call without a result", nil)
		}
		if err != nil {
			return nil, err
		}
		// The server waits for each answer, so they are made here, one at a time, in order.
		if sm := ev.GetProgress().GetSampling(); sm != nil {
			s.forwardSampling(ctx, req.Session, sm, gw)
		}
		if e := ev.GetProgress().GetElicitation(); e != nil {
			s.forwardElicitation(ctx, req.Session, e, gw)
		}
		if r := ev.GetResponse(); r != nil {
			return r, nil
		}
	}
}

// forwardSampling asks the client for the completion a server asked for, until the request's
// expiry, and passes the answer (or why there is none) to the gateway.
func (s *Server) forwardSampling(ctx context.Context, ss *mcp.ServerSession, sm *toolsv1.Sampling, gw Answers) {
	sctx, cancel := untilExpiry(ctx, sm.GetExpiresAt())
	defer cancel()
	p := &mcp.CreateMessageParams{MaxTokens: int64(sm.GetMaxTokens()), SystemPrompt: sm.GetSystemPrompt(), StopSequences: sm.GetStopSequences(),
		Temperature: sm.GetTemperature(), Messages: make([]*mcp.SamplingMessage, 0, len(sm.GetMessages()))}
	for _, m := range sm.GetMessages() {
		p.Messages = append(p.Messages, &mcp.SamplingMessage{Role: mcp.Role(m.GetRole()), Content: &mcp.TextContent{Text: m.GetText()}})
	}
	ans := &mcpgatewayv1.AnswerSamplingRequest{Id: sm.GetId()}
	res, err := ss.CreateMessage(sctx, p)
	if err != nil && sctx.Err() != nil {
		// The request expired (the gateway ends it at the same moment, telling the server
		// nobody answered in time) or the call ended: there is nothing left to answer.
		s.log.Debug("MCP endpoint: the client did not answer a sampling request before it expired", "server", sm.GetServer())
		return
	}
	switch {
	case err != nil:
		ans.Error = clip("the MCP client did not sample: "+err.Error(), maxSampledError)
	case res == nil || res.Content == nil:
		ans.Error = "the MCP client answered without content"
	default:
		t, ok := res.Content.(*mcp.TextContent)
		switch {
		case !ok:
			ans.Error = fmt.Sprintf("the MCP client answered with %T content; only text is passed on", res.Content)
		case len(t.Text) > maxSampledText:
			ans.Error = fmt.Sprintf("the MCP client's completion is %d bytes; at most %d are passed on", len(t.Text), maxSampledText)
		default:
			ans.Text, ans.Model = t.Text, clip(res.Model, maxSampledModel)
			switch res.StopReason {
			case "endTurn", "stopSequence", "maxTokens":
				ans.StopReason = res.StopReason
			}
		}
	}
	s.answer(ctx, "sampling", func(actx context.Context) error {
		_, err := gw.AnswerSampling(actx, ans)
		return err
	})
}

// forwardElicitation asks the client's user for the input a server asked for (form or URL
// mode, as the client declared), and passes the answer to the gateway; a client that cannot
// be asked declines at once.
func (s *Server) forwardElicitation(ctx context.Context, ss *mcp.ServerSession, e *toolsv1.Elicitation, gw Answers) {
	ans := &mcpgatewayv1.AnswerElicitationRequest{Id: e.GetId(), Action: "decline"}
	if params, ok := elicitParams(ss, e); ok {
		ectx, cancel := untilExpiry(ctx, e.GetExpiresAt())
		res, err := ss.Elicit(ectx, params)
		cancel()
		if err == nil && res != nil {
			ans.Action = res.Action
			if res.Action == "accept" && len(res.Content) > 0 {
				if b, err := json.Marshal(res.Content); err == nil && len(b) <= maxElicitContent {
					ans.Content = string(b)
				} else {
					ans.Action = "decline"
				}
			}
		}
	}
	s.answer(ctx, "elicitation", func(actx context.Context) error {
		_, err := gw.AnswerElicitation(actx, ans)
		return err
	})
}

// untilExpiry is ctx ending at a request's expiry too, when it has one.
func untilExpiry(ctx context.Context, exp *timestamppb.Timestamp) (context.Context, context.CancelFunc) {
	if exp == nil {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, exp.AsTime())
}

// elicitParams is a server's request for input as the client's elicitation/create, when the
// client declared the mode it needs.
func elicitParams(ss *mcp.ServerSession, e *toolsv1.Elicitation) (*mcp.ElicitParams, bool) {
	ip := ss.InitializeParams()
	if ip == nil || ip.Capabilities == nil || ip.Capabilities.Elicitation == nil {
		return nil, false
	}
	el := ip.Capabilities.Elicitation
	if e.GetUrl() != "" {
		if el.URL == nil {
			return nil, false
		}
		return &mcp.ElicitParams{Mode: "url", Message: e.GetMessage(), URL: e.GetUrl(), ElicitationID: e.GetId()}, true
	}
	if el.Form == nil && el.URL != nil {
		return nil, false
	}
	schema := any(map[string]any{"type": "object", "properties": map[string]any{}})
	if e.GetRequestedSchema() != "" {
		schema = json.RawMessage(e.GetRequestedSchema())
	}
	return &mcp.ElicitParams{Message: e.GetMessage(), RequestedSchema: schema}, true
}

// answer makes one call to the gateway with an answer, also when the tool call has just ended
// (the answer may be what ended it), within answerTimeout; a failure is logged: the server's
// request then ends as unanswered.
func (s *Server) answer(ctx context.Context, kind string, call func(context.Context) error) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), answerTimeout)
	defer cancel()
	if err := call(actx); err != nil {
		s.log.Debug("MCP endpoint: the answer did not reach the MCP gateway", "kind", kind, "error", err)
	}
}

// clip cuts s to at most n bytes, on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
