package orchestrator

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

// metrics are the orchestrator's Prometheus-exported instruments (through internal/telemetry's
// global meter provider): turn latency by outcome, tool-call outcomes, and the tokens turns use.
// Exported as hermes_turn_duration_seconds, hermes_tool_calls_total and hermes_tokens_total.
type metrics struct {
	turnDuration metric.Float64Histogram
	toolCalls    metric.Int64Counter
	tokens       metric.Int64Counter
}

func newMetrics() metrics {
	m := otel.Meter("github.com/hermes-agent/hermes/services/orchestrator")
	turn, _ := m.Float64Histogram("hermes.turn.duration", metric.WithUnit("s"),
		metric.WithDescription("Wall time of a turn, by status"),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120))
	calls, _ := m.Int64Counter("hermes.tool.calls", metric.WithDescription("Tool calls, by tool and outcome (ok or the error code)"))
	tokens, _ := m.Int64Counter("hermes.tokens", metric.WithUnit("{token}"),
		metric.WithDescription("Tokens of model calls, by type (prompt, completion, cached) and source (provider or tokenizer)"))
	return metrics{turnDuration: turn, toolCalls: calls, tokens: tokens}
}

func (m metrics) turnFinished(ctx context.Context, st orchestratorv1.TurnStatus, took time.Duration, u *orchestratorv1.Usage) {
	status := strings.ToLower(strings.TrimPrefix(st.String(), "TURN_STATUS_"))
	m.turnDuration.Record(ctx, took.Seconds(), metric.WithAttributes(attribute.String("status", status)))
	src := attribute.String("source", u.GetSource())
	for typ, n := range map[string]int64{"prompt": u.GetPromptTokens(), "completion": u.GetCompletionTokens(), "cached": u.GetCachedTokens()} {
		if n > 0 {
			m.tokens.Add(ctx, n, metric.WithAttributes(attribute.String("type", typ), src))
		}
	}
}

func (m metrics) toolCall(ctx context.Context, tool, errorCode string) {
	outcome := "ok"
	if errorCode != "" {
		outcome = errorCode
	}
	m.toolCalls.Add(ctx, 1, metric.WithAttributes(attribute.String("tool", tool), attribute.String("outcome", outcome)))
}
