package rpc

import (
	"fmt"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// retryServiceConfig retries every method on UNAVAILABLE with exponential backoff. gRPC only
// retries a call when it is safe to (before any response message was received), and Hermes'
// writes are idempotent by client ids or keys where a retry could repeat them. RunTurn is the
// exception: each call is a new turn, so a retry after a failure whose effect is unknown (the
// user message may be stored) would run the request twice; its caller decides.
const retryServiceConfig = `{
  "loadBalancingConfig": [{"round_robin": {}}],
  "methodConfig": [{
    "name": [{}],
    "retryPolicy": {
      "maxAttempts": 4,
      "initialBackoff": "0.05s",
      "maxBackoff": "1s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }, {
    "name": [{"service": "hermes.orchestrator.v1.OrchestratorService", "method": "RunTurn"}]
  }]
}`

// Dial returns a client connection to target (host:port, or any gRPC target such as
// dns:///hermes-session:7070) with the shared telemetry, message-size limits and retries on
// UNAVAILABLE. The connection is lazy: Dial does not wait for the server.
func Dial(target string, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()),
		grpc.WithDefaultServiceConfig(retryServiceConfig),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(defaultMaxMessageBytes),
			grpc.MaxCallSendMsgSize(defaultMaxMessageBytes),
		),
	}
	opts = append(opts, StaticWindows()...)
	opts = append(opts, extra...)
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", target, err)
	}
	return conn, nil
}

// StaticWindows are the dial options of the servers' fixed flow-control windows, for every gRPC
// client Hermes makes (Dial's, and clients a library dials, such as Qdrant's): with dynamic
// windows a client sends a BDP ping, which the server must answer, after nearly every response.
func StaticWindows() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithStaticStreamWindowSize(streamWindowBytes),
		grpc.WithStaticConnWindowSize(connWindowBytes),
	}
}
