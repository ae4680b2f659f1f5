package multiprocess

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hermes-agent/hermes/app/demo"
	"github.com/hermes-agent/hermes/internal/otlptest"
	"github.com/hermes-agent/hermes/internal/testenv"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

// TestRestaurantAcrossProcesses plays the article's restaurant example through the
// orchestrator's port with every service in its own process: session 1 mentions 蜀香园, the
// memory process extracts it from turn.finished (NATS JetStream), and session 2 books "the
// Sichuan restaurant I mentioned" with the name filled from the recalled memory and the
// explicit time and party size kept; the MCP tools run on a restaurant MCP server added to the
// gateway process through AddServer. Then the turn's trace and the metrics endpoints.
func TestRestaurantAcrossProcesses(t *testing.T) {
	ctx := context.Background()
	s := newStack(t, stackOptions{})
	rest := s.addRestaurant(ctx, "")
	t.Cleanup(rest.Close)

	s1 := s.createSession(ctx, demo.User, "查餐厅")
	r1, err := demo.RunTurn(ctx, s.orchestrator, &orchestratorv1.RunTurnRequest{SessionId: s1, UserId: demo.User, Text: demo.FirstMessage}, nil)
	if err != nil {
		t.Fatalf("session 1: %v", err)
	}
	if r1.Failed != nil {
		t.Fatalf("session 1 failed: %s: %s", r1.Failed.GetCode(), r1.Failed.GetMessage())
	}
	if !strings.Contains(r1.Completed.GetText(), "朝阳区建国路 88 号") {
		t.Errorf("session 1 answer %q does not give 蜀香园's address", r1.Completed.GetText())
	}
	mems, err := demo.WaitForMemory(ctx, s.memory, demo.User, 30*time.Second)
	if err != nil {
		t.Fatalf("memory process: %v", err)
	}

	s2 := s.createSession(ctx, demo.User, "订位")
	r2, err := demo.RunTurn(ctx, s.orchestrator, &orchestratorv1.RunTurnRequest{SessionId: s2, UserId: demo.User, Text: demo.SecondMessage}, nil)
	if err != nil {
		t.Fatalf("session 2: %v", err)
	}
	if r2.Failed != nil {
		t.Fatalf("session 2 failed: %s: %s", r2.Failed.GetCode(), r2.Failed.GetMessage())
	}
	if problems := demo.Check(r2, mems, rest.Reservations()); len(problems) > 0 {
		t.Fatalf("the restaurant example across five processes: %s", strings.Join(problems, "; "))
	}
	for _, line := range demo.CheckLines(r2, rest.Reservations()) {
		t.Log(line)
	}
	var calls []string
	for _, c := range r2.Calls {
		calls = append(calls, c.GetName())
	}
	if diff := cmp.Diff([]string{"locallife_search_restaurant", "locallife_make_reservation"}, calls); diff != "" {
		t.Errorf("session 2 tool calls (-want +got):\n%s", diff)
	}

	t.Run("trace", func(t *testing.T) { checkTrace(t, s, r2) })
	t.Run("metrics", func(t *testing.T) { checkMetrics(t, s) })
}

// checkTrace finds the trace of session 2's turn (the orchestrator's turn span carries the turn
// id) and checks it holds spans of all five services — orchestrator, session, memory (Recall),
// tools and mcpgateway (the MCP tool calls) — as one tree, with the model call's GenAI
// attributes.
func checkTrace(t *testing.T, s *stack, r *demo.TurnResult) {
	turnID := ""
	for _, ev := range r.Events {
		if st := ev.GetStarted(); st != nil {
			turnID = st.GetTurnId()
		}
	}
	want := []string{"hermes-mcpgateway", "hermes-memory", "hermes-orchestrator", "hermes-session", "hermes-tools"}
	var spans []otlptest.Span
	var traceID string
	// Each process exports in batches every second: wait for the last ones.
	whole := testenv.Poll(20*time.Second, func() bool {
		traceID = ""
		for _, sp := range s.otlp.Spans() {
			if sp.Attributes["hermes.turn_id"] == turnID && sp.Service == "hermes-orchestrator" {
				traceID = sp.TraceID
			}
		}
		if traceID != "" {
			spans = s.otlp.Trace(traceID)
			if got := otlptest.Services(spans); len(got) >= len(want) && len(orphans(spans)) == 0 {
				return true
			}
		}
		return false
	})
	if !whole {
		t.Fatalf("after 20 s, the trace %q of turn %s has services %v, orphan spans %v (want %v); %d spans received in all",
			traceID, turnID, otlptest.Services(spans), orphans(spans), want, len(s.otlp.Spans()))
	}
	got := otlptest.Services(spans)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("services in the turn's trace (-want +got):\n%s", diff)
	}
	perService := map[string][]string{}
	for _, sp := range spans {
		perService[sp.Service] = append(perService[sp.Service], sp.Name)
	}
	for svc, names := range perService {
		sort.Strings(names)
		t.Logf("trace %s: %s: %d spans: %s", traceID, svc, len(names), strings.Join(slices.Compact(names), ", "))
	}
	// Spans every service must have contributed: the RPCs of the turn (the context is built in
	// the user message's AppendMessages).
	for _, name := range []string{
		"hermes.session.v1.SessionService/AppendMessages",
		"hermes.memory.v1.MemoryService/Recall",
		// A turn's tool calls stream the tools' progress back through both services.
		"hermes.tools.v1.ToolService/ExecuteToolStream",
		"hermes.mcpgateway.v1.MCPGatewayService/CallToolStream",
	} {
		if !hasSpan(spans, name, "") {
			t.Errorf("the trace has no server span %s", name)
		}
	}

	// GenAI semantic conventions on the model calls: one span per call with the model and the
	// token counts.
	var model []otlptest.Span
	for _, sp := range spans {
		if sp.Attributes["gen_ai.request.model"] != "" {
			model = append(model, sp)
		}
	}
	if len(model) == 0 {
		t.Fatalf("no span of the trace has GenAI attributes (gen_ai.request.model, gen_ai.usage.input_tokens, gen_ai.usage.output_tokens); the model spans have %v", attrsOf(spans, "orchestrator.model"))
	}
	for _, sp := range model {
		if sp.Attributes["gen_ai.request.model"] != "scripted-multiprocess" {
			t.Errorf("model span %s: gen_ai.request.model %q, want scripted-multiprocess", sp.Name, sp.Attributes["gen_ai.request.model"])
		}
		for _, k := range []string{"gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"} {
			if v := sp.Attributes[k]; v == "" || v == "int_value:0" {
				t.Errorf("model span %s has no %s: %v", sp.Name, k, sp.Attributes)
			}
		}
	}
	t.Logf("%d model-call spans with GenAI attributes, e.g. %v", len(model), model[0].Attributes)
}

// orphans returns the spans whose parent is not in the set (other than the root).
func orphans(spans []otlptest.Span) []string {
	ids := map[string]bool{}
	for _, sp := range spans {
		ids[sp.SpanID] = true
	}
	var out []string
	for _, sp := range spans {
		if sp.ParentID != "" && !ids[sp.ParentID] {
			out = append(out, sp.Service+":"+sp.Name)
		}
	}
	return out
}

func hasSpan(spans []otlptest.Span, name, service string) bool {
	for _, sp := range spans {
		if sp.Name == name && (service == "" || sp.Service == service) {
			return true
		}
	}
	return false
}

func attrsOf(spans []otlptest.Span, name string) []map[string]string {
	var out []map[string]string
	for _, sp := range spans {
		if sp.Name == name {
			out = append(out, sp.Attributes)
		}
	}
	return out
}

// checkMetrics scrapes /metrics of every process (HERMES_METRICS_LISTEN): each serves the
// otelgrpc server metrics, and the orchestrator's has the turn metrics.
func checkMetrics(t *testing.T, s *stack) {
	for _, p := range s.c.Procs {
		body, err := scrape(p.MetricsAddr)
		if err != nil {
			t.Errorf("%s: %v", p.Name, err)
			continue
		}
		if !strings.Contains(body, "rpc_server_") {
			t.Errorf("%s /metrics has no otelgrpc server metrics (rpc_server_*):\n%s", p.Name, head(body, 2000))
		}
		if !strings.Contains(body, `service_name="hermes-`+p.Target+`"`) {
			t.Errorf("%s /metrics: target_info does not name the service hermes-%s", p.Name, p.Target)
		}
		if p.Target != "orchestrator" {
			continue
		}
		names := metricNames(body)
		t.Logf("orchestrator metric families: %s", strings.Join(names, " "))
		for _, want := range []string{
			"hermes_turn_duration_seconds", // turn latency
			"hermes_tool_calls_total",      // tool-call outcomes
			"hermes_tokens_total",          // token counts
			"gen_ai_client_token_usage",    // GenAI semantic conventions
			"gen_ai_client_operation_duration_seconds",
		} {
			if !slices.Contains(names, want) {
				t.Errorf("the orchestrator's /metrics has no %s", want)
			}
		}
		// The turns of this test are counted: two completed turns, successful tool calls.
		for _, want := range []string{"hermes_turn_duration_seconds_count", "hermes_tool_calls_total"} {
			if !hasSample(body, want) {
				t.Errorf("the orchestrator's /metrics has no sample of %s after two turns", want)
			}
		}
	}
}

// hasSample reports whether the exposition has a sample line of the metric with a value > 0.
func hasSample(body, name string) bool {
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil && v > 0 {
			return true
		}
	}
	return false
}

func scrape(addr string) (string, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return string(b), nil
}

// metricNames lists the metric families of a Prometheus text exposition.
func metricNames(body string) []string {
	seen := map[string]bool{}
	for _, line := range strings.Split(body, "\n") {
		if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
			seen[strings.Fields(name)[0]] = true
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func head(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
