package tools

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/hermes-agent/hermes/internal/rpc"
	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// fiveFieldSchema is a typical tool schema: five properties, three required, an enum, a format
// and a range.
const fiveFieldSchema = `{
  "type": "object",
  "properties": {
    "origin": {"type": "string", "description": "Departure city or IATA code", "minLength": 2},
    "destination": {"type": "string", "description": "Arrival city or IATA code", "minLength": 2},
    "date": {"type": "string", "format": "date", "description": "Departure date"},
    "passengers": {"type": "integer", "minimum": 1, "maximum": 9},
    "cabin": {"type": "string", "enum": ["economy", "premium", "business", "first"]}
  },
  "required": ["origin", "destination", "date"],
  "additionalProperties": false
}`

func benchSchema(b *testing.B) *compiledSchema {
	cs, err := compileSchema(fiveFieldSchema, true)
	if err != nil {
		b.Fatal(err)
	}
	return cs
}

// BenchmarkValidate5Field is parse + coercion check + validation of valid arguments.
func BenchmarkValidate5Field(b *testing.B) {
	cs := benchSchema(b)
	args := `{"origin":"PAR","destination":"NRT","date":"2026-03-14","passengers":2,"cabin":"economy"}`
	b.ReportAllocs()
	for b.Loop() {
		if _, _, v, err := checkArguments(cs, args); err != nil || v != nil {
			b.Fatal(v, err)
		}
	}
}

// BenchmarkValidate5FieldCoerced has a string where an integer is wanted.
func BenchmarkValidate5FieldCoerced(b *testing.B) {
	cs := benchSchema(b)
	args := `{"origin":"PAR","destination":"NRT","date":"2026-03-14","passengers":"2","cabin":"economy"}`
	b.ReportAllocs()
	for b.Loop() {
		if _, c, v, err := checkArguments(cs, args); err != nil || v != nil || len(c) != 1 {
			b.Fatal(v, err)
		}
	}
}

// BenchmarkValidate5FieldInvalid fails three ways and builds the model's message.
func BenchmarkValidate5FieldInvalid(b *testing.B) {
	cs := benchSchema(b)
	args := `{"origin":"PAR","date":"14/03/2026","passengers":20,"cabin":"coach"}`
	b.ReportAllocs()
	for b.Loop() {
		_, _, v, err := checkArguments(cs, args)
		if err != nil || len(v) != 4 {
			b.Fatal(v, err)
		}
		_ = validationMessage("search_flights", v)
	}
}

const benchExpression = `{"expression":"(12.5 * 4 + 3) / 2"}`

// BenchmarkBuiltinDirect calls the calculator's Go function as a Go caller would.
func BenchmarkBuiltinDirect(b *testing.B) {
	bt := calculatorBuiltin()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		out, err := bt.Run(ctx, json.RawMessage(benchExpression))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := json.Marshal(out); err != nil {
			b.Fatal(err)
		}
	}
}

func benchService(b *testing.B, store Store) *Service {
	svc := newTestService(b, store, Options{})
	if err := svc.RegisterBuiltins(context.Background()); err != nil {
		b.Fatal(err)
	}
	return svc
}

// BenchmarkExecuteBuiltinInProcess is ExecuteTool without gRPC: registry read, validation,
// execution, result.
func BenchmarkExecuteBuiltinInProcess(b *testing.B) {
	svc := benchService(b, testBoltStore(b))
	ctx := context.Background()
	req := &toolsv1.ExecuteToolRequest{Name: "calculator", Arguments: benchExpression}
	b.ReportAllocs()
	for b.Loop() {
		if res, err := svc.execute(ctx, req); err != nil || !res.GetSuccess() {
			b.Fatal(res, err)
		}
	}
}

// tcpClient serves svc on loopback TCP with the shared server plumbing.
func tcpClient(b *testing.B, svc *Service) toolsv1.ToolServiceClient {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := rpc.NewServer(rpc.ServerOptions{Logger: quietLogger(), ShutdownTimeout: time.Second})
	srv.Register(&toolsv1.ToolService_ServiceDesc, svc)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx, lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close(); cancel(); <-done })
	return toolsv1.NewToolServiceClient(conn)
}

func benchExecuteGRPC(b *testing.B, store Store) {
	c := tcpClient(b, benchService(b, store))
	ctx := context.Background()
	req := &toolsv1.ExecuteToolRequest{Name: "calculator", Arguments: benchExpression}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := c.ExecuteTool(ctx, req)
		if err != nil || !resp.GetResult().GetSuccess() {
			b.Fatal(resp, err)
		}
	}
}

// BenchmarkExecuteBuiltinGRPC is ExecuteTool of the calculator over gRPC on loopback TCP with
// the embedded (bbolt) registry.
func BenchmarkExecuteBuiltinGRPC(b *testing.B) { benchExecuteGRPC(b, testBoltStore(b)) }

// BenchmarkExecuteBuiltinGRPCRedis is the same with the registry in Redis (one HGETALL a call).
func BenchmarkExecuteBuiltinGRPCRedis(b *testing.B) { benchExecuteGRPC(b, testRedisStore(b)) }

// BenchmarkSelectTools selects from the 64-tool test set (index cached per registry revision).
func BenchmarkSelectTools(b *testing.B) {
	tools, _ := loadSelectData(b)
	svc := newTestService(b, testBoltStore(b), Options{})
	c := serve(b, svc)
	registerSelectTools(b, c, tools)
	ctx := context.Background()
	req := &toolsv1.SelectToolsRequest{Text: "Will it rain in Seattle this weekend? Show me the forecast."}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := svc.SelectTools(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExecuteMCPInProcess is ExecuteTool of an MCP tool as Hermes runs it in one process:
// the call goes through the server's in-process channel (every interceptor and the stats
// handler), and the tool service calls the gateway's CallTool directly (LocalMCP over
// rpc.LocalUnary: the interceptors once more, no stats handler), a gateway that answers at once.
// What it measures is the tool service's own cost in front of the gateway, without the stdio
// server. BenchmarkExecuteMCPInProcessChannel is the same with CallTool on the in-process
// channel, as before stop 33.
func BenchmarkExecuteMCPInProcess(b *testing.B) { benchExecuteMCPInProcess(b, true) }

func BenchmarkExecuteMCPInProcessChannel(b *testing.B) { benchExecuteMCPInProcess(b, false) }

func benchExecuteMCPInProcess(b *testing.B, local bool) {
	// The providers hermes serve installs (internal/telemetry without an OTLP endpoint): spans
	// sampled only under a sampled caller, metrics kept for a reader.
	tp, mp := otel.GetTracerProvider(), otel.GetMeterProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample()))))
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())))
	b.Cleanup(func() { otel.SetTracerProvider(tp); otel.SetMeterProvider(mp) })
	srv := rpc.NewServer(rpc.ServerOptions{Logger: quietLogger(), ShutdownTimeout: time.Second})
	gw := &fakeGateway{noRecord: true, script: func(int64, context.Context, *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
		return &mcpgatewayv1.CallToolResponse{Success: true, Output: `{"issues":[{"number":1,"title":"a bug"}]}`, Structured: true}, nil
	}}
	srv.Register(&mcpgatewayv1.MCPGatewayService_ServiceDesc, gw)
	var gwClient MCPCaller = mcpgatewayv1.NewMCPGatewayServiceClient(srv.InProcess())
	if local {
		gwClient = LocalMCP(rpc.LocalUnary(srv, mcpgatewayv1.MCPGatewayService_CallTool_FullMethodName, gw.CallTool), gwClient)
	}
	svc := newTestService(b, testBoltStore(b), Options{MCP: func() (MCPCaller, error) { return gwClient, nil }})
	srv.Register(&toolsv1.ToolService_ServiceDesc, svc)
	ctx := context.Background()
	if _, _, err := svc.reg.Register(ctx, mcpSpec("list_issues"), "mcp:github", false); err != nil {
		b.Fatal(err)
	}
	c := toolsv1.NewToolServiceClient(srv.InProcess())
	req := &toolsv1.ExecuteToolRequest{Name: "list_issues", Arguments: `{"repo":"hermes"}`, CallId: "c1"}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := c.ExecuteTool(ctx, req)
		if err != nil || !resp.GetResult().GetSuccess() {
			b.Fatal(resp, err)
		}
	}
}

// BenchmarkExecuteBuiltinInProcessChannel is the calculator as the monolith's orchestrator calls
// it: on the in-process channel, unary (what it uses for tools that report no progress) and
// streaming (ExecuteToolStream, for MCP tools).
func BenchmarkExecuteBuiltinInProcessChannel(b *testing.B) {
	srv := rpc.NewServer(rpc.ServerOptions{Logger: quietLogger(), ShutdownTimeout: time.Second})
	srv.Register(&toolsv1.ToolService_ServiceDesc, benchService(b, testBoltStore(b)))
	c := toolsv1.NewToolServiceClient(srv.InProcess())
	ctx := context.Background()
	req := &toolsv1.ExecuteToolRequest{Name: "calculator", Arguments: benchExpression}
	b.Run("unary", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if resp, err := c.ExecuteTool(ctx, req); err != nil || !resp.GetResult().GetSuccess() {
				b.Fatal(resp, err)
			}
		}
	})
	b.Run("stream", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			stream, err := c.ExecuteToolStream(ctx, &toolsv1.ExecuteToolStreamRequest{Request: req})
			if err != nil {
				b.Fatal(err)
			}
			ev, err := stream.Recv()
			if err != nil || !ev.GetResponse().GetResult().GetSuccess() {
				b.Fatal(ev, err)
			}
			if _, err := stream.Recv(); err != io.EOF {
				b.Fatal(err)
			}
		}
	})
}
