package mcpgateway

import (
	"context"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// LocalClient calls a gateway in the same process without gRPC: the tool service uses it when
// both run in one process (hermes serve), which saves a loopback round trip and two
// serializations per MCP tool call. It validates requests as the gRPC service does.
type LocalClient struct {
	s *Server
}

// NewLocalClient returns a client of g's service in this process.
func NewLocalClient(g *Gateway) *LocalClient { return &LocalClient{s: NewServer(g)} }

// CallTool is MCPGatewayService.CallTool.
func (l *LocalClient) CallTool(ctx context.Context, in *pb.CallToolRequest, _ ...grpc.CallOption) (*pb.CallToolResponse, error) {
	return l.s.CallTool(ctx, in)
}

// CallToolStream is MCPGatewayService.CallToolStream.
func (l *LocalClient) CallToolStream(ctx context.Context, in *pb.CallToolStreamRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[pb.CallToolStreamResponse], error) {
	ctx, cancel := context.WithCancel(ctx)
	st := &localStream{ctx: ctx, events: make(chan *pb.CallToolStreamResponse, 16), done: make(chan struct{})}
	go func() {
		defer cancel()
		st.err = l.s.CallToolStream(in, st)
		close(st.done)
	}()
	return st, nil
}

// localStream is both ends of an in-process CallToolStream: the server sends into events, the
// client receives from it.
type localStream struct {
	ctx    context.Context
	events chan *pb.CallToolStreamResponse
	done   chan struct{}
	err    error // set before done is closed
}

func (s *localStream) Context() context.Context { return s.ctx }

// Send is the server's end. Sends never block past the call's end.
func (s *localStream) Send(ev *pb.CallToolStreamResponse) error {
	select {
	case s.events <- ev:
		return nil
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}

// Recv is the client's end: the events, then io.EOF or the call's error.
func (s *localStream) Recv() (*pb.CallToolStreamResponse, error) {
	select {
	case ev := <-s.events:
		return ev, nil
	case <-s.done:
		select {
		case ev := <-s.events:
			return ev, nil
		default:
		}
		if s.err != nil {
			return nil, s.err
		}
		return nil, io.EOF
	}
}

func (s *localStream) Header() (metadata.MD, error) { return nil, nil }
func (s *localStream) Trailer() metadata.MD         { return nil }
func (s *localStream) CloseSend() error             { return nil }
func (s *localStream) SendMsg(any) error            { return nil }
func (s *localStream) RecvMsg(any) error            { return nil }
func (s *localStream) SetHeader(metadata.MD) error  { return nil }
func (s *localStream) SendHeader(metadata.MD) error { return nil }
func (s *localStream) SetTrailer(metadata.MD)       {}

var (
	_ pb.MCPGatewayService_CallToolStreamServer             = (*localStream)(nil)
	_ grpc.ServerStreamingClient[pb.CallToolStreamResponse] = (*localStream)(nil)
)
