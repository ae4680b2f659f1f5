package mcpgateway

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/hermes-agent/hermes/internal/auth"
	"github.com/hermes-agent/hermes/internal/model"
	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/testenv"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
	"github.com/hermes-agent/hermes/services/mcpgateway/endpoint"
)

// samplingUpstream is an MCP server over Streamable HTTP whose tool ask asks the client's model
// (sampling/createMessage) to complete its prompt, count times (more than maxSamplingMessages
// makes an oversize request), and returns "LLM response: <completion>" or the error it got. Its
// tool ask_detached asks outside its call's context (a server that does not cancel its request
// when its call is cancelled) and sends the error it got to the channel returned.
func samplingUpstream(t *testing.T) (string, <-chan string) {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "upstream", Version: "1"}, nil)
	detached := make(chan string, 1)
	mcp.AddTool(srv, &mcp.Tool{Name: "ask_detached", Description: "Asks the client's model, not cancelled with the call."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			_, err := req.Session.CreateMessage(context.WithoutCancel(ctx), &mcp.CreateMessageParams{MaxTokens: 10,
				Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "hi"}}}})
			detached <- fmt.Sprint(err)
			return &mcp.CallToolResult{}, nil, nil
		})
	type args struct {
		Prompt   string `json:"prompt"`
		Messages int    `json:"messages,omitempty"`
		// Stops stop sequences of Stop's text; NullMessage adds a message sent as null.
		Stops       int    `json:"stops,omitempty"`
		Stop        string `json:"stop,omitempty"`
		NullMessage bool   `json:"null_message,omitempty"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "ask", Description: "Asks the client's model to complete the prompt."},
		func(ctx context.Context, req *mcp.CallToolRequest, a args) (*mcp.CallToolResult, any, error) {
			p := &mcp.CreateMessageParams{MaxTokens: 5000, SystemPrompt: "be brief", Temperature: 0.5}
			for range max(a.Messages, 1) {
				p.Messages = append(p.Messages, &mcp.SamplingMessage{Role: "user", Content: &mcp.TextContent{Text: a.Prompt}})
			}
			for range a.Stops {
				p.StopSequences = append(p.StopSequences, a.Stop)
			}
			if a.NullMessage {
				p.Messages = append(p.Messages, nil)
			}
			res, err := req.Session.CreateMessage(ctx, p)
			if err != nil {
				msg := err.Error()
				if je := (*jsonrpc.Error)(nil); errors.As(err, &je) {
					msg = fmt.Sprintf("code %d: %s", je.Code, je.Message)
				}
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "sampling failed: " + msg}}}, nil, nil
			}
			text, _ := res.Content.(*mcp.TextContent)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "LLM response: " + text.Text + " (" + res.Model + ")"}}}, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "greet", Description: "Asks the user for their name."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Your name?", RequestedSchema: map[string]any{
				"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}, "required": []string{"name"}}})
			if err != nil {
				return nil, nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%s %v %v", res.Action, res.Content["name"], res.Meta["reason"])}}}, nil, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL, detached
}

// samplingStack is the whole path of a sampling request from an MCP server behind the gateway
// to an MCP client of Hermes' endpoint and back: the upstream server, the gateway and the tool
// service over gRPC, and the endpoint over HTTP.
type samplingStack struct {
	gw     pb.MCPGatewayServiceClient
	g      *Gateway
	tools  toolsv1.ToolServiceClient
	mcpURL string
	// detached is the error the upstream's ask_detached got.
	detached <-chan string
}

type fixedModel struct{ text string }

func (m fixedModel) Complete(context.Context, model.Request) (*model.Response, error) {
	return &model.Response{Content: m.text, Model: "hermes-model"}, nil
}

func startSamplingStack(t *testing.T, cfg Config, sampling *pb.SamplingPolicy, opts Options) *samplingStack {
	t.Helper()
	return startSamplingStackSpec(t, cfg, &pb.ServerSpec{Sampling: sampling}, opts)
}

// startSamplingStackSpec is startSamplingStack with the server's spec (its name and transport
// are set here).
func startSamplingStackSpec(t *testing.T, cfg Config, spec *pb.ServerSpec, opts Options) *samplingStack {
	t.Helper()
	s := &samplingStack{}
	// Started first so that it closes last, after the gateway's connection to it.
	upstream, detached := samplingUpstream(t)
	var gwc atomic.Pointer[pb.MCPGatewayServiceClient]
	s.tools = startToolService(t, &gwc)
	opts.Registry = NewToolServiceRegistry(func() (toolsv1.ToolServiceClient, error) { return s.tools, nil })
	s.gw, s.g = startGateway(t, cfg, opts)
	gwc.Store(&s.gw)

	ep, err := endpoint.New(endpoint.Options{
		Tools:   func() (endpoint.ToolClient, error) { return s.tools, nil },
		Gateway: func() (endpoint.Answers, error) { return s.gw, nil },
		Logger:  testLogger(t),
		Config:  endpoint.Config{ElicitMissing: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(ep.HTTPHandler())
	t.Cleanup(hs.Close)
	s.mcpURL, s.detached = hs.URL, detached
	spec.Name, spec.Transport = "up", &pb.ServerSpec_Http{Http: &pb.HTTPTransport{Url: upstream}}
	if _, err := s.gw.AddServer(context.Background(), &pb.AddServerRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "up_ask in the tool service", func() bool {
		_, err := s.tools.GetTool(context.Background(), &toolsv1.GetToolRequest{Name: "up_ask"})
		return err == nil
	})
	return s
}

// client connects an MCP client to the endpoint; a non-nil sample declares sampling.
func (s *samplingStack) client(t *testing.T, sample func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error)) *mcp.ClientSession {
	t.Helper()
	opts := &mcp.ClientOptions{}
	if sample != nil {
		opts.CreateMessageHandler = sample
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "ide", Version: "1"}, opts).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.mcpURL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func callText(t *testing.T, cs *mcp.ClientSession, args map[string]any) (string, bool) {
	t.Helper()
	return callToolText(t, cs, "up_ask", args)
}

func callToolText(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("tools/call: %v", err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError
}

// TestSamplingThroughEndpoint: a server's sampling request (ask_caller) reaches the MCP client
// that called the tool through Hermes' endpoint, as sampling/createMessage with the server's
// messages, system prompt and max_tokens capped by the spec, and the client's completion goes
// back to the server. A client without the capability is not asked: the request goes to Hermes'
// model when the spec allows it and is refused (-32001) otherwise; an oversize request is
// refused (-32602) before any client sees it.
func TestSamplingThroughEndpoint(t *testing.T) {
	type want struct {
		contains string
		isError  bool
		asked    int64 // createMessage requests the client got
	}
	tests := []struct {
		name     string
		policy   *pb.SamplingPolicy
		capable  bool
		messages int
		prompt   string
		stops    int    // stop sequences of stop's text
		stop     string //
		null     bool   // a message sent as null
		want     want
	}{
		{"client answers", &pb.SamplingPolicy{AskCaller: true, MaxTokens: 200}, true, 1, "What is 2+2?", 0, "", false, want{"LLM response: client says: What is 2+2? [be brief, 200 tokens] (client-model)", false, 1}},
		{"client preferred to Hermes' model", &pb.SamplingPolicy{AskCaller: true, Allow: true}, true, 1, "hi", 0, "", false, want{"LLM response: client says: hi [be brief, 1024 tokens] (client-model)", false, 1}},
		{"no capability, no model allowed", &pb.SamplingPolicy{AskCaller: true}, false, 1, "hi", 0, "", false, want{"code -32001: sampling is refused: no caller of this call answers sampling", true, 0}},
		{"no capability, Hermes' model allowed", &pb.SamplingPolicy{AskCaller: true, Allow: true}, false, 1, "hi", 0, "", false, want{"LLM response: from Hermes (hermes-model)", false, 0}},
		{"too many messages", &pb.SamplingPolicy{AskCaller: true}, true, maxSamplingMessages + 1, "hi", 0, "", false, want{"code -32602: sampling request has 65 messages; at most 64 are accepted", true, 0}},
		{"too much text", &pb.SamplingPolicy{AskCaller: true}, true, 2, strings.Repeat("x", maxSamplingText/2+1), 0, "", false, want{"code -32602: sampling request has 65546 bytes of text; at most 65536", true, 0}},
		{"too many stop sequences", &pb.SamplingPolicy{AskCaller: true}, true, 1, "hi", 33, "x", false, want{"code -32602: sampling request has 33 stop sequences; at most 32 are accepted", true, 0}},
		{"stop sequences count as text", &pb.SamplingPolicy{AskCaller: true}, true, 1, "hi", 2, strings.Repeat("x", maxSamplingText/2), false, want{"code -32602: sampling request has 65546 bytes of text; at most 65536", true, 0}},
		{"a null message", &pb.SamplingPolicy{AskCaller: true, Allow: true}, true, 1, "hi", 0, "", true, want{"code -32602: sampling request with a null message", true, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := startSamplingStack(t, testConfig(), tc.policy, Options{Sampler: fixedModel{"from Hermes"}})
			var asked atomic.Int64
			var sample func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error)
			if tc.capable {
				sample = func(_ context.Context, r *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
					asked.Add(1)
					text := r.Params.Messages[0].Content.(*mcp.TextContent).Text
					return &mcp.CreateMessageResult{Role: "assistant", Model: "client-model", StopReason: "endTurn",
						Content: &mcp.TextContent{Text: "client says: " + text + " [" + r.Params.SystemPrompt + ", " + strconv.FormatInt(r.Params.MaxTokens, 10) + " tokens]"}}, nil
				}
			}
			got, isErr := callText(t, s.client(t, sample), map[string]any{"prompt": tc.prompt, "messages": tc.messages, "stops": tc.stops, "stop": tc.stop, "null_message": tc.null})
			if !strings.Contains(got, tc.want.contains) || isErr != tc.want.isError || asked.Load() != tc.want.asked {
				t.Errorf("result %q (isError %v), client asked %d times; want it to contain %q (isError %v), asked %d", got, isErr, asked.Load(), tc.want.contains, tc.want.isError, tc.want.asked)
			}
		})
	}
}

// TestElicitationThroughEndpoint: on the stream of a client that answers sampling, a server's
// request for input ("ask") reaches the client as elicitation/create when it declared
// elicitation, and its answer goes back; a client without elicitation declines at once (the
// server does not wait for the expiry).
func TestElicitationThroughEndpoint(t *testing.T) {
	cfg := testConfig()
	cfg.ElicitTimeout = time.Hour // a wait for the expiry would fail the test's deadline
	s := startSamplingStackSpec(t, cfg, &pb.ServerSpec{Sampling: &pb.SamplingPolicy{AskCaller: true}, Elicitation: "ask"}, Options{})
	testenv.WaitFor(t, 30*time.Second, "up_greet in the tool service", func() bool {
		_, err := s.tools.GetTool(context.Background(), &toolsv1.GetToolRequest{Name: "up_greet"})
		return err == nil
	})
	sample := func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
		return nil, errors.New("not asked here")
	}
	for _, tc := range []struct {
		name   string
		elicit func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error)
		want   string
	}{
		{"client answers", func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			if r.Params.Message != "Your name?" {
				return &mcp.ElicitResult{Action: "decline"}, nil
			}
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}, nil
		}, "accept Ada <nil>"},
		{"client cannot elicit", nil, "decline <nil> <nil>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := &mcp.ClientOptions{CreateMessageHandler: sample, ElicitationHandler: tc.elicit}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "ide", Version: "1"}, opts).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.mcpURL}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			if got, isErr := callToolText(t, cs, "up_greet", nil); got != tc.want || isErr {
				t.Errorf("result %q (isError %v); want %q", got, isErr, tc.want)
			}
		})
	}
}

// TestSamplingDeadline: a client that never answers does not hold the server: the request ends
// at its expiry (mcpgateway.elicit-timeout) with an error, the client's request is cancelled at
// that deadline, and the tool's call ends.
func TestSamplingDeadline(t *testing.T) {
	cfg := testConfig()
	cfg.ElicitTimeout = 500 * time.Millisecond
	s := startSamplingStack(t, cfg, &pb.SamplingPolicy{AskCaller: true}, Options{})
	ended := make(chan error, 1)
	cs := s.client(t, func(ctx context.Context, _ *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
		<-ctx.Done() // the endpoint's deadline for the client, or the session's end
		ended <- ctx.Err()
		return nil, ctx.Err()
	})
	start := time.Now()
	got, isErr := callText(t, cs, map[string]any{"prompt": "hang"})
	if !isErr || !strings.Contains(got, "did not answer within 500ms") {
		t.Errorf("result %q (isError %v); want the server's error that the caller did not answer", got, isErr)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the call took %s; the request should end at its 500ms expiry", took)
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Error("the client's sampling request was not cancelled at its deadline")
	}
}

// TestSamplingCallEnds: a request shown to the caller of a call stops waiting when that call
// ends (its client cancelled it), though the server does not cancel the request: the server gets
// the error at once, not at the expiry, and its request no longer counts against
// maxElicitPending.
func TestSamplingCallEnds(t *testing.T) {
	cfg := testConfig()
	cfg.ElicitTimeout = time.Hour
	s := startSamplingStack(t, cfg, &pb.SamplingPolicy{AskCaller: true}, Options{})
	testenv.WaitFor(t, 30*time.Second, "up_ask_detached in the tool service", func() bool {
		_, err := s.tools.GetTool(context.Background(), &toolsv1.GetToolRequest{Name: "up_ask_detached"})
		return err == nil
	})
	asked, unblock := make(chan struct{}, 1), make(chan struct{})
	defer close(unblock) // before the client's session closes, which waits for its handler
	cs := s.client(t, func(ctx context.Context, _ *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
		asked <- struct{}{}
		select {
		case <-ctx.Done():
		case <-unblock:
		}
		return nil, errors.New("not answered")
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	called := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "up_ask_detached"})
		called <- err
	}()
	select {
	case <-asked:
	case <-time.After(30 * time.Second):
		t.Fatal("the client was not asked for a completion")
	}
	cancel()
	<-called
	select {
	case got := <-s.detached:
		if want := "the call ended before its caller answered"; !strings.Contains(got, want) {
			t.Errorf("the server's request ended with %q; want it to contain %q", got, want)
		}
	case <-time.After(20 * time.Second):
		t.Error("the server's request still waits after its call ended")
	}
}

// TestAnswerSampling: through real gRPC, a caller of ExecuteToolStream that answers sampling gets
// the request with an unguessable id; answers with an unknown id, with the id of another kind
// (AnswerElicitation) or over the limits are refused and leave the request waiting; the right
// answer completes it, once; an answer that reaches another replica is relayed over NATS. A
// caller that does not answer sampling (an agent turn) never sees the request: Hermes' model
// answers it where allowed. The policy table lets only operators and services answer.
func TestAnswerSampling(t *testing.T) {
	nc := testNATS(t)
	prefix := "test.sampling." + rand.Text()
	s := startSamplingStack(t, testConfig(), &pb.SamplingPolicy{AskCaller: true, Allow: true},
		Options{Sampler: fixedModel{"from Hermes"}, ElicitRelay: NewNATSElicitRelay(nc, prefix)})
	other, _ := startGateway(t, testConfig(), Options{ElicitRelay: NewNATSElicitRelay(testNATS(t), prefix)})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// An agent turn's call: no sampling event, Hermes' model answers.
	for ev := range execStream(ctx, t, s.tools, false) {
		if ev == nil || ev.GetProgress().GetSampling() != nil {
			t.Fatalf("agent turn's call: %v; want Hermes' model's completion and no sampling event", ev)
		}
		if r := ev.GetResponse(); r != nil {
			if !strings.Contains(r.GetResult().GetOutput(), "from Hermes") {
				t.Fatalf("agent turn's call: %v; want Hermes' model's completion", r)
			}
			break
		}
	}

	events := execStream(ctx, t, s.tools, true)
	var sm *toolsv1.Sampling
	for sm == nil {
		ev := <-events
		if ev == nil || ev.GetResponse() != nil {
			t.Fatalf("the call ended without a sampling request: %v", ev)
		}
		sm = ev.GetProgress().GetSampling()
	}
	wantReq := &toolsv1.Sampling{Server: "up", SystemPrompt: "be brief", MaxTokens: 1024, Temperature: new(0.5),
		Messages: []*toolsv1.SamplingMessage{{Role: "user", Text: "relay me"}}}
	if diff := cmp.Diff(wantReq, sm, protocmp.Transform(), protocmp.IgnoreFields(&toolsv1.Sampling{}, "id", "expires_at")); diff != "" || len(sm.GetId()) != 32 {
		t.Errorf("sampling request (-want +got):\n%s\nid %q", diff, sm.GetId())
	}

	refusals := []struct {
		name   string
		answer func() error
		code   codes.Code
	}{
		{"unknown id", func() error {
			// Well-formed, one character off the real id.
			forged := []byte(sm.GetId())
			if forged[0] == '0' {
				forged[0] = '1'
			} else {
				forged[0] = '0'
			}
			_, err := s.gw.AnswerSampling(ctx, &pb.AnswerSamplingRequest{Id: string(forged), Text: "forged"})
			return err
		}, codes.NotFound},
		{"malformed id", func() error {
			_, err := s.gw.AnswerSampling(ctx, &pb.AnswerSamplingRequest{Id: sm.GetId() + "x", Text: "forged"})
			return err
		}, codes.InvalidArgument},
		{"elicitation answer to a sampling id", func() error {
			_, err := s.gw.AnswerElicitation(ctx, &pb.AnswerElicitationRequest{Id: sm.GetId(), Action: "accept"})
			return err
		}, codes.NotFound},
		{"text over 64 KiB", func() error {
			_, err := s.gw.AnswerSampling(ctx, &pb.AnswerSamplingRequest{Id: sm.GetId(), Text: strings.Repeat("x", maxSamplingAnswerText+1)})
			return err
		}, codes.InvalidArgument},
		{"model over 256 bytes", func() error {
			_, err := s.gw.AnswerSampling(ctx, &pb.AnswerSamplingRequest{Id: sm.GetId(), Text: "ok", Model: strings.Repeat("m", 257)})
			return err
		}, codes.InvalidArgument},
		{"unknown stop reason", func() error {
			_, err := s.gw.AnswerSampling(ctx, &pb.AnswerSamplingRequest{Id: sm.GetId(), Text: "ok", StopReason: "because"})
			return err
		}, codes.InvalidArgument},
		{"no id", func() error {
			_, err := s.gw.AnswerSampling(ctx, &pb.AnswerSamplingRequest{Text: "ok"})
			return err
		}, codes.InvalidArgument},
	}
	for _, r := range refusals {
		if got := status.Code(r.answer()); got != r.code {
			t.Errorf("%s: %v; want %v", r.name, got, r.code)
		}
	}
	// The right answer, sent to the other replica, which relays it.
	if _, err := other.AnswerSampling(ctx, &pb.AnswerSamplingRequest{Id: sm.GetId(), Text: "relayed", Model: "caller-model", StopReason: "maxTokens"}); err != nil {
		t.Fatalf("AnswerSampling on the other replica: %v", err)
	}
	for ev := range events {
		if r := ev.GetResponse(); r != nil {
			if out := r.GetResult().GetOutput(); !strings.Contains(out, "LLM response: relayed (caller-model)") {
				t.Errorf("result %q; want the caller's completion", out)
			}
			break
		}
	}
	if _, err := s.gw.AnswerSampling(ctx, &pb.AnswerSamplingRequest{Id: sm.GetId(), Text: "again"}); status.Code(err) != codes.NotFound {
		t.Errorf("a second answer: %v; want NotFound", err)
	}
}

// execStream calls up_ask through ExecuteToolStream and passes its events on; nil after an error.
func execStream(ctx context.Context, t *testing.T, c toolsv1.ToolServiceClient, answersSampling bool) <-chan *toolsv1.ExecuteToolStreamResponse {
	t.Helper()
	stream, err := c.ExecuteToolStream(ctx, &toolsv1.ExecuteToolStreamRequest{Request: &toolsv1.ExecuteToolRequest{
		Name: "up_ask", Arguments: `{"prompt":"relay me"}`, AnswersSampling: answersSampling}})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan *toolsv1.ExecuteToolStreamResponse, 16)
	go func() {
		defer close(out)
		for {
			ev, err := stream.Recv()
			if err != nil {
				out <- nil
				return
			}
			out <- ev
		}
	}()
	return out
}

// TestAnswerSamplingPolicy: AnswerSampling goes through the one policy table: a user key is
// refused (a user could otherwise put words in a server's model's mouth for another user's
// call); operators and services get past it (to NotFound for an id nothing waits for).
func TestAnswerSamplingPolicy(t *testing.T) {
	keysFile := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(keysFile, []byte(epAliceKey+": alice\n"+epOpsKey+": {role: operator, name: ops}\nsk-svc-0123456789abcdefgh: {role: service}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := auth.LoadKeyFile(keysFile, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	g := New(testConfig(), Options{Logger: testLogger(t)})
	t.Cleanup(g.Close)
	srv := rpc.NewServer(rpc.ServerOptions{Logger: testLogger(t), ShutdownTimeout: time.Second, Auth: auth.New(keys, testLogger(t))})
	srv.Register(&pb.MCPGatewayService_ServiceDesc, NewServer(g))
	client := pb.NewMCPGatewayServiceClient(testenv.Serve(t, srv))
	for _, tc := range []struct {
		key  string
		want codes.Code
	}{
		{"", codes.Unauthenticated},
		{epAliceKey, codes.PermissionDenied},
		{epOpsKey, codes.NotFound},
		{"sk-svc-0123456789abcdefgh", codes.NotFound},
	} {
		ctx := context.Background()
		if tc.key != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", tc.key)
		}
		_, err := client.AnswerSampling(ctx, &pb.AnswerSamplingRequest{Id: "0123456789abcdef0123456789abcdef", Text: "words"})
		if got := status.Code(err); got != tc.want {
			t.Errorf("key %q: %v (%v); want %v", tc.key, got, err, tc.want)
		}
	}
}

// TestAwaitUsesEveryAcceptedAnswer: an answer whose sender was told it was accepted is the one
// the request uses, even when it arrives as the wait ends (found in review: the answer could be
// accepted into the request's buffer after its wait had given up, and the server was told the
// request expired). Many requests whose wait ends as their answer arrives.
func TestAwaitUsesEveryAcceptedAnswer(t *testing.T) {
	h := newElicitHub(nil)
	c := &serverConn{}
	var accepted, used, lost int
	for i := range 3000 {
		ids := make(chan string, 1)
		done := make(chan waitOutcome, 1)
		go func() {
			_, outcome := h.await(context.Background(), c, kindSampling, func(RelayedAnswer) error { return nil }, time.Duration(i%50)*time.Microsecond,
				func(id string) (func(), <-chan struct{}, bool) { ids <- id; return func() {}, nil, true })
			done <- outcome
		}()
		err := h.deliver(<-ids, RelayedAnswer{Kind: kindSampling, Content: `{"text":"hi"}`})
		outcome := <-done
		if err == nil {
			accepted++
			if outcome != waitAnswered {
				lost++
			}
		}
		if outcome == waitAnswered {
			used++
		}
	}
	if lost > 0 || used != accepted {
		t.Errorf("%d answers accepted, %d used; %d accepted answers lost to an expired wait", accepted, used, lost)
	}
	if accepted == 0 {
		t.Error("no answer arrived in time: the test checks nothing")
	}
	t.Logf("%d of 3000 answers arrived in time", accepted)
}

// TestCheckRequestID: an answer's id must have the shape of the ids requests are given; any other
// id (a NATS wildcard or token separator among them) is refused as invalid before it names a
// subject.
func TestCheckRequestID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{"0123456789abcdef0123456789abcdef", true},
		{"", false},
		{"0123456789abcdef", false},
		{"0123456789ABCDEF0123456789ABCDEF", false},
		{"0123456789abcdef0123456789abcdeg", false},
		{"0123456789abcdef0123456789abcdef00", false},
		{"*", false},
		{">", false},
		{"0123456789abcdef.123456789abcdef", false},
		{"0123456789abcdef 123456789abcdef", false},
	} {
		var v rpc.Violations
		checkRequestID(&v, tc.id)
		if got := v.Err() == nil; got != tc.want {
			t.Errorf("id %q accepted: %v, want %v (%v)", tc.id, got, tc.want, v.Err())
		}
	}
}
