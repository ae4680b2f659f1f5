package mcpgateway

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hermes-agent/hermes/internal/errclass"
	"github.com/hermes-agent/hermes/internal/rpc"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// Sampling for the caller (sampling.ask_caller): a server's sampling/createMessage is sent to
// the caller of its call in flight as Progress.sampling, when that caller answers sampling
// (CallToolRequest.answers_sampling: Hermes' MCP endpoint, for a client that declared the
// capability), and waits for AnswerSampling as an elicitation waits for its answer (elicit.go:
// the random id is the capability, the call's clock stands still, the answer may reach any
// replica). Agent turns do not answer sampling, so their calls' requests go to Hermes' model
// where the operator allows it.

// Limits of a caller's answer; the request's own limits are sample's (maxSamplingMessages,
// maxSamplingText).
const (
	maxSamplingAnswerText  = maxSamplingText
	maxSamplingAnswerModel = 256
	maxSamplingAnswerError = 1 << 10
	maxSamplingStopReason  = 64
)

// samplingAnswer is a caller's answer as it travels to the request (RelayedAnswer.Content).
type samplingAnswer struct {
	Text       string `json:"text,omitempty"`
	Model      string `json:"model,omitempty"`
	StopReason string `json:"stop_reason,omitempty"`
	Error      string `json:"error,omitempty"`
}

// samplingWait is how long a request waits for the caller: mcpgateway.elicit-timeout, or less
// when the server's request ends sooner.
func (c *serverConn) samplingWait(ctx context.Context) time.Duration {
	wait := c.g.cfg.ElicitTimeout
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl))
	}
	return max(wait, 0)
}

// askSample passes a checked sampling request to the caller of conn's call in flight and
// waits for its answer. It reports false when no caller can be asked (none that answers
// sampling, more than one call in flight, or maxElicitPending requests waiting); otherwise the
// result, or the error the server gets: the caller refused, nobody answered within wait, or
// the server's request ended.
func (h *elicitHub) askSample(ctx context.Context, c *serverConn, p *mcp.CreateMessageParams, maxTokens int, wait time.Duration) (*mcp.CreateMessageResult, error, bool) {
	s := &pb.Sampling{Server: c.spec.GetName(), SystemPrompt: p.SystemPrompt, MaxTokens: int32(min(maxTokens, maxSamplingTokens)),
		StopSequences: p.StopSequences, ExpiresAt: timestamppb.New(time.Now().Add(wait))}
	if p.Temperature != 0 {
		s.Temperature = &p.Temperature
	}
	for _, m := range p.Messages {
		t, ok := m.Content.(*mcp.TextContent)
		if !ok { // sample lets only text through
			return nil, rpcError(jsonrpc.CodeInvalidParams, "sampling is refused: only text messages are supported"), true
		}
		role := "user"
		if m.Role == "assistant" {
			role = "assistant"
		}
		s.Messages = append(s.Messages, &pb.SamplingMessage{Role: role, Text: t.Text})
	}
	check := func(a RelayedAnswer) error {
		_, err := parseSamplingAnswer(a.Content)
		return err
	}
	a, outcome := h.await(ctx, c, kindSampling, check, wait, func(id string) (func(), <-chan struct{}, bool) {
		s.Id = id
		release, ended, told := c.g.progress.ask(c, fmt.Sprintf("the server asks the caller's model for a completion (%d messages)", len(p.Messages)), &pb.Progress{Sampling: s})
		if told {
			c.g.log.Info("MCP server asked for a completion (sampling); passed to the caller", "server", c.spec.GetName(), "sampling", id, "messages", len(p.Messages))
		}
		return release, ended, told
	})
	switch outcome {
	case waitAnswered:
		sa, err := parseSamplingAnswer(a.Content)
		if err != nil { // checked on delivery
			return nil, rpcError(codeSamplingRejected, "the caller's answer was invalid"), true
		}
		if sa.Error != "" {
			c.g.log.Info("sampling refused by the caller", "server", c.spec.GetName(), "sampling", s.Id)
			return nil, rpcError(codeSamplingRejected, "the caller did not sample: "+sa.Error), true
		}
		c.g.log.Info("sampling answered by the caller", "server", c.spec.GetName(), "sampling", s.Id, "bytes", len(sa.Text))
		stop := sa.StopReason
		if stop == "" {
			stop = "endTurn"
		}
		return &mcp.CreateMessageResult{Content: &mcp.TextContent{Text: sa.Text}, Model: sa.Model, Role: "assistant", StopReason: stop}, nil, true
	case waitExpired:
		c.g.progress.broadcast(c, "the caller did not answer the server's request for a completion in time")
		return nil, rpcError(codeSamplingRefused, fmt.Sprintf("sampling is refused: the caller did not answer within %s", wait.Round(time.Millisecond))), true
	case waitCanceled:
		return nil, rpcError(codeSamplingRefused, "sampling is refused: the request ended before the caller answered"), true
	case waitCallEnded:
		return nil, rpcError(codeSamplingRefused, "sampling is refused: the call ended before its caller answered"), true
	}
	return nil, nil, false
}

// parseSamplingAnswer checks a caller's answer (RelayedAnswer.Content) against the limits.
func parseSamplingAnswer(content string) (samplingAnswer, error) {
	var a samplingAnswer
	if err := json.Unmarshal([]byte(content), &a); err != nil {
		return a, errclass.Errorf(errclass.Invalid, "the answer is not a sampling answer")
	}
	return a, checkSamplingAnswer(a)
}

// checkSamplingAnswer applies the documented limits of AnswerSamplingRequest.
func checkSamplingAnswer(a samplingAnswer) error {
	var v rpc.Violations
	v.MaxLen("text", a.Text, maxSamplingAnswerText)
	v.MaxLen("model", a.Model, maxSamplingAnswerModel)
	v.MaxLen("error", a.Error, maxSamplingAnswerError)
	if !utf8.ValidString(a.Text) || !utf8.ValidString(a.Model) || !utf8.ValidString(a.Error) {
		v.Add("text", "text, model and error must be UTF-8")
	}
	switch a.StopReason {
	case "", "endTurn", "stopSequence", "maxTokens":
	default:
		v.Add("stop_reason", `must be "endTurn", "stopSequence", "maxTokens" or empty`)
	}
	return v.Err()
}

// AnswerSampling implements MCPGatewayService.
func (s *Server) AnswerSampling(ctx context.Context, req *pb.AnswerSamplingRequest) (*pb.AnswerSamplingResponse, error) {
	var v rpc.Violations
	checkRequestID(&v, req.GetId())
	if err := v.Err(); err != nil {
		return nil, err
	}
	a := samplingAnswer{Text: req.GetText(), Model: req.GetModel(), StopReason: req.GetStopReason(), Error: req.GetError()}
	if err := checkSamplingAnswer(a); err != nil {
		return nil, err
	}
	content, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	if err := s.g.elicits.answer(ctx, req.GetId(), RelayedAnswer{Kind: kindSampling, Content: string(content)}); err != nil {
		return nil, err
	}
	return &pb.AnswerSamplingResponse{}, nil
}
