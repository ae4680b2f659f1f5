package tools

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"

	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// TestMCPCutOutputNamesTrueSize replays issue 27: the gateway cut a 388,901-byte result to its
// 64 KiB cap, and ExecuteTool's preview said "first 15026 of 65535 bytes". The preview, the
// output_bytes and the limit now name the whole output and the cap that applied.
func TestMCPCutOutputNamesTrueSize(t *testing.T) {
	cut := strings.Repeat("x", 65535)
	g := &fakeGateway{script: func(int64, context.Context, *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
		return &mcpgatewayv1.CallToolResponse{Success: true, Truncated: true, Output: cut, OriginalBytes: 388901, LimitBytes: 65536}, nil
	}}
	gw := startGateway(t, g)
	c, _ := newClient(t, Options{MCP: func() (MCPCaller, error) { return gw, nil }})
	mustRegister(t, c, mcpSpec("github_list_issues"))

	res := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "github_list_issues", Arguments: `{"repo":"hermes"}`})
	if !res.GetSuccess() || !res.GetTruncated() || res.GetOutputBytes() != 388901 || res.GetOutputLimitBytes() != 16<<10 {
		t.Fatalf("success %v truncated %v output_bytes %d limit %d; want true true 388901 16384",
			res.GetSuccess(), res.GetTruncated(), res.GetOutputBytes(), res.GetOutputLimitBytes())
	}
	if !strings.Contains(res.GetOutput(), "of 388901 bytes;") || !strings.Contains(res.GetOutput(), "by the 16384-byte cap") {
		t.Errorf("the preview's note: …%s", res.GetOutput()[len(res.GetOutput())-160:])
	}

	// A caller that passes output on asks the gateway for it whole, up to its own limit; the
	// gateway's cut is then the one reported.
	res = execute(t, c, &toolsv1.ExecuteToolRequest{Name: "github_list_issues", Arguments: `{"repo":"hermes"}`, MaxOutputBytes: 1 << 20})
	g.mu.Lock()
	asked := g.requests[len(g.requests)-1].GetMaxOutputBytes()
	g.mu.Unlock()
	if asked != 1<<20 {
		t.Errorf("the gateway was asked for %d bytes, want 1048576", asked)
	}
	if res.GetOutputBytes() != 388901 || res.GetOutputLimitBytes() != 65536 {
		t.Errorf("output_bytes %d limit %d; want 388901 65536", res.GetOutputBytes(), res.GetOutputLimitBytes())
	}
}

// TestMCPMediaPassesThrough: the bytes of an image the gateway passed on reach the caller in
// media, and the output describes it for a model.
func TestMCPMediaPassesThrough(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\nnot really")
	g := &fakeGateway{script: func(int64, context.Context, *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
		return &mcpgatewayv1.CallToolResponse{Success: true, Output: "a picture", Contents: []*mcpgatewayv1.Content{
			{Type: "image", MimeType: "image/png", Size: int64(len(png)), Data: png},
			{Type: "audio", MimeType: "audio/wav", Size: 9 << 20, Omitted: "over the cap"},
		}}, nil
	}}
	gw := startGateway(t, g)
	c, _ := newClient(t, Options{MCP: func() (MCPCaller, error) { return gw, nil }})
	mustRegister(t, c, mcpSpec("github_list_issues"))
	res := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "github_list_issues", Arguments: `{"repo":"hermes"}`})
	want := `"a picture\n[image image/png 18 bytes]\n[audio audio/wav 9437184 bytes; not passed on: over the cap]"`
	if !res.GetSuccess() || res.GetOutput() != want {
		t.Fatalf("output %s, want %s", res.GetOutput(), want)
	}
	m := res.GetMedia()
	if len(m) != 2 || !bytes.Equal(m[0].GetData(), png) || m[0].GetMimeType() != "image/png" || len(m[1].GetData()) != 0 || m[1].GetOmitted() == "" {
		t.Errorf("media %v", m)
	}
}

// streamGateway answers CallToolStream: it asks for user input at once (an elicitation that
// expires after ask), then answers after answerAfter.
type streamGateway struct {
	fakeGateway
	ask, answerAfter time.Duration
	timeout          atomic.Int64 // the request's timeout, in nanoseconds
}

func (g *streamGateway) CallToolStream(req *mcpgatewayv1.CallToolStreamRequest, st grpc.ServerStreamingServer[mcpgatewayv1.CallToolStreamResponse]) error {
	g.timeout.Store(int64(req.GetRequest().GetTimeout().AsDuration()))
	e := &mcpgatewayv1.Elicitation{Id: "e1", Server: "github", Message: "which repo?", ExpiresAt: timestamppb.New(time.Now().Add(g.ask))}
	if err := st.Send(&mcpgatewayv1.CallToolStreamResponse{Event: &mcpgatewayv1.CallToolStreamResponse_Progress{Progress: &mcpgatewayv1.Progress{Message: "asks", Elicitation: e}}}); err != nil {
		return err
	}
	select {
	case <-time.After(g.answerAfter):
	case <-st.Context().Done():
		return st.Context().Err()
	}
	return st.Send(&mcpgatewayv1.CallToolStreamResponse{Event: &mcpgatewayv1.CallToolStreamResponse_Response{Response: &mcpgatewayv1.CallToolResponse{Success: true, Output: "declined, went on"}}})
}

// TestElicitationPushesDeadlineBack: the time a person has to answer a tool's request for input
// is added to the call's deadline, so a tool that waits for the answer (and is declined when
// nobody answers) is not cut off by its own timeout (issue 27).
func TestElicitationPushesDeadlineBack(t *testing.T) {
	g := &streamGateway{ask: 6 * time.Second, answerAfter: 4 * time.Second}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	mcpgatewayv1.RegisterMCPGatewayServiceServer(srv, g)
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(); srv.Stop() })
	client := mcpgatewayv1.NewMCPGatewayServiceClient(conn)

	c, _ := newClient(t, Options{MCP: func() (MCPCaller, error) { return client, nil }})
	spec := mcpSpec("github_list_issues")
	spec.Timeout = dur(2 * time.Second)
	mustRegister(t, c, spec)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := c.ExecuteToolStream(ctx, &toolsv1.ExecuteToolStreamRequest{Request: &toolsv1.ExecuteToolRequest{Name: "github_list_issues", Arguments: `{"repo":"hermes"}`}})
	if err != nil {
		t.Fatal(err)
	}
	var res *toolsv1.ToolResult
	asked := false
	for res == nil {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		asked = asked || ev.GetProgress().GetElicitation() != nil
		res = ev.GetResponse().GetResult()
	}
	if !asked || !res.GetSuccess() || res.GetOutput() != `"declined, went on"` {
		t.Errorf("asked %v; result %v; want the tool's answer after the person's time", asked, res)
	}
	if d := time.Duration(g.timeout.Load()); d <= 0 || d > 2*time.Second {
		t.Errorf("the gateway was given %s, want the tool's own timeout of 2s at most", d)
	}
}
