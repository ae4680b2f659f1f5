package tools

import (
	"context"
	"sync"

	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// progressKey carries a call's progress receiver in its context, from ExecuteToolStream to the
// executor that can report progress (the MCP executor).
type progressKey struct{}

func withProgress(ctx context.Context, fn func(*toolsv1.ToolProgress)) context.Context {
	return context.WithValue(ctx, progressKey{}, fn)
}

// progressFrom returns the call's progress receiver, or nil when nobody listens.
func progressFrom(ctx context.Context) func(*toolsv1.ToolProgress) {
	fn, _ := ctx.Value(progressKey{}).(func(*toolsv1.ToolProgress))
	return fn
}

// ExecuteToolStream implements ToolService: ExecuteTool with the tool's progress streamed
// before the result.
func (s *Service) ExecuteToolStream(req *toolsv1.ExecuteToolStreamRequest, stream toolsv1.ToolService_ExecuteToolStreamServer) error {
	// Progress is sent from the goroutine that receives it; a stream's Send is not safe for
	// concurrent use, and a report that would wait for a slow reader is dropped.
	var mu sync.Mutex // guards stream sends and ended
	ended := false
	ctx := withProgress(stream.Context(), func(p *toolsv1.ToolProgress) {
		// A request for the caller (elicitation, sampling) is never dropped: the server waits
		// for its answer. They are few (the gateway bounds those waiting per server).
		if p.GetElicitation() != nil || p.GetSampling() != nil {
			mu.Lock()
		} else if !mu.TryLock() {
			return
		}
		defer mu.Unlock()
		if !ended {
			_ = stream.Send(&toolsv1.ExecuteToolStreamResponse{Event: &toolsv1.ExecuteToolStreamResponse_Progress{Progress: p}})
		}
	})
	resp, err := s.ExecuteTool(ctx, req.GetRequest())
	mu.Lock()
	defer mu.Unlock()
	ended = true
	if err != nil {
		return err
	}
	return stream.Send(&toolsv1.ExecuteToolStreamResponse{Event: &toolsv1.ExecuteToolStreamResponse_Response{Response: resp}})
}
