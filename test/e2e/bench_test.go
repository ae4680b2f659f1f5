package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/hermes-agent/hermes/app"
	"github.com/hermes-agent/hermes/app/demo"
	"github.com/hermes-agent/hermes/internal/model"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	"github.com/hermes-agent/hermes/internal/rpc"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
	"github.com/hermes-agent/hermes/services/orchestrator"
	"github.com/hermes-agent/hermes/test/hermestest"
)

// stickyFacts are said at some turns of the synthetic session, marked sticky, and must be in
// every later request.
var stickyFacts = map[int]string{
	2:  "记住：我的会员号是 M-23891",
	11: "记住：我对花生过敏",
	23: "remember: ship everything to 杭州西湖区文三路 90 号",
	37: "记住：发票抬头是 赫尔墨斯科技",
	52: "remember: never call me before 10:00",
}

// sessionModel plays a 60-turn working session: most turns fetch a ~2,000-token JSON report and
// answer briefly; summary requests get a structured summary built from what they fold in.
func sessionModel(req scripted.Request) scripted.Reply {
	if len(req.Messages) > 0 && req.Messages[0].Content == orchestrator.SummarySystemPrompt {
		// Keep the current summary's facts and add what the user said in the folded messages.
		var facts []string
		inFacts := false
		for _, line := range strings.Split(req.Messages[1].Content, "\n") {
			switch {
			case line == "Facts:":
				inFacts = true
			case inFacts && strings.HasPrefix(line, "- "):
				facts = append(facts, strings.TrimPrefix(line, "- "))
			case strings.Contains(line, " user] "):
				inFacts = false
				facts = append(facts, "the user asked: "+strings.SplitN(line, "] ", 2)[1])
			default:
				inFacts = false
			}
		}
		if len(facts) > 20 {
			facts = facts[len(facts)-20:]
		}
		b, _ := json.Marshal(map[string]any{"goal": "review the daily order reports", "decisions": []string{"fetch one report per day"}, "facts": facts, "open_items": []string{}})
		return scripted.Text(string(b))
	}
	if len(req.ToolResults()) > 0 {
		return scripted.Text("Report received; orders look normal.")
	}
	var day int
	if _, err := fmt.Sscanf(req.LastUser(), "report for day %d", &day); err == nil {
		return scripted.Calls(scripted.Call("get_report", map[string]int{"day": day}))
	}
	return scripted.Text("Noted.")
}

type tokenStats struct {
	last       *orchestratorv1.TokenBreakdown
	perRequest []int
	last10     []int
	missing    int
}

// playSession runs the synthetic session and returns the prompt tokens of every model request
// the turns made (from the ContextAssembled events; summary calls excluded).
func playSession(b *testing.B, trimmed bool) tokenStats {
	s := startStack(b, sessionModel, stackOptions{embedded: true})
	reports := &counter{}
	s.registerHTTPTool("get_report", reportSchema, false, reports.handler(func(in map[string]any) any {
		day, _ := in["day"].(float64)
		return bigReport(int(day))
	}))
	ctx := context.Background()
	cfg := &sessionv1.SessionConfig{}
	if !trimmed {
		cfg = &sessionv1.SessionConfig{WindowTurns: 200, TokenBudget: 10_000_000}
	}
	resp, err := s.sessions.CreateSession(ctx, &sessionv1.CreateSessionRequest{UserId: "bench", Config: cfg})
	if err != nil {
		b.Fatal(err)
	}
	sid := resp.GetSession().GetId()
	var st tokenStats
	const turns = 60
	said := []string{}
	for turn := 1; turn <= turns; turn++ {
		text := fmt.Sprintf("report for day %d", turn)
		opts := &orchestratorv1.TurnOptions{SkipMemory: true}
		if f, ok := stickyFacts[turn]; ok {
			text, opts.Sticky = f, true
		}
		before := len(s.model.Requests())
		res := s.run(ctx, sid, "bench", text, opts)
		if res.Completed == nil {
			b.Fatalf("turn %d: %v", turn, res.Failed)
		}
		for _, c := range res.Contexts {
			st.last = c.GetTokens()
			n := int(c.GetTokens().GetTotal())
			st.perRequest = append(st.perRequest, n)
			if turn > turns-10 {
				st.last10 = append(st.last10, n)
			}
		}
		// Every sticky fact said so far is in every request of this turn.
		for _, r := range s.model.Requests()[before:] {
			if r.Messages[0].Content == orchestrator.SummarySystemPrompt || len(r.Tools) == 0 {
				continue // summary and memory-extraction requests
			}
			var all strings.Builder
			for _, m := range r.Messages {
				all.WriteString(m.Content)
			}
			for _, f := range said {
				if !strings.Contains(all.String(), f) {
					st.missing++
				}
			}
		}
		if f, ok := stickyFacts[turn]; ok {
			said = append(said, f)
		}
	}
	return st
}

func mean(xs []int) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s int
	for _, x := range xs {
		s += x
	}
	return float64(s) / float64(len(xs))
}

// BenchmarkSessionTokens is the 40-minute session of the article: 60 turns, most with a JSON
// tool output of about 2,000 tokens, five sticky facts along the way; tokens per model request
// with the full history and with the window (12 turns, 8,000-token budget) plus the rolling
// summary. Run with -benchtime=1x.
func BenchmarkSessionTokens(b *testing.B) {
	results := map[string]tokenStats{}
	for _, mode := range []struct {
		name    string
		trimmed bool
	}{{"full-history", false}, {"trimmed+summary", true}} {
		b.Run(mode.name, func(b *testing.B) {
			var st tokenStats
			for range b.N {
				st = playSession(b, mode.trimmed)
			}
			results[mode.name] = st
			b.ReportMetric(mean(st.perRequest), "tokens/request")
			b.ReportMetric(mean(st.last10), "tokens/request-last10")
			b.ReportMetric(float64(slices.Max(st.perRequest)), "max-tokens")
			b.ReportMetric(float64(st.missing), "sticky-missing")
		})
	}
	full, trim := results["full-history"], results["trimmed+summary"]
	if len(full.perRequest) > 0 && len(trim.perRequest) > 0 {
		line := fmt.Sprintf("tokens/request mean %.0f → %.0f (%.0f%% less), last 10 turns %.0f → %.0f (%.0f%% less), max %d → %d; sticky facts missing from requests: %d (full) / %d (trimmed)",
			mean(full.perRequest), mean(trim.perRequest), 100*(1-mean(trim.perRequest)/mean(full.perRequest)),
			mean(full.last10), mean(trim.last10), 100*(1-mean(trim.last10)/mean(full.last10)),
			slices.Max(full.perRequest), slices.Max(trim.perRequest), full.missing, trim.missing)
		b.Log(line)
		b.Logf("last request, full history: %s", demo.Composition(full.last))
		b.Logf("last request, trimmed+summary: %s", demo.Composition(trim.last))
		if trim.missing > 0 {
			b.Errorf("%d sticky facts were missing from requests", trim.missing)
		}
	}
}

// instantModel answers at once, with fixed usage so that the scripted model spends no time
// counting: one tool call (a builtin), then the answer.
func instantModel(req scripted.Request) scripted.Reply {
	u := &scripted.Usage{PromptTokens: 500, CompletionTokens: 10}
	if len(req.ToolResults()) > 0 {
		return scripted.Reply{Text: "It is now.", Usage: u}
	}
	return scripted.Reply{ToolCalls: []scripted.ToolCall{scripted.Call("current_time", `{}`)}, Usage: u}
}

// overheadStack is a running Hermes for the overhead benchmark.
type overheadStack struct {
	model    *scripted.Server
	orchAddr string
	addrs    map[string]string // target → address
	close    []func()
}

// startOverhead starts Hermes monolithic (one process, embedded stores and NATS) or as
// microservices over loopback: one in-process app per target, each with its own listener,
// reaching the others by address, on Redis and NATS (memory on its embedded store: its Redis
// mode needs Qdrant). The memory extractor is off: it works after the turn, not in it.
func startOverhead(b *testing.B, micro bool) *overheadStack {
	layout := hermestest.Monolith
	if micro {
		layout = hermestest.PerTarget
	}
	hs := hermestest.Start(b, hermestest.Options{Layout: layout, Model: instantModel, ScriptExtractor: true, Configure: func(c *app.Config) {
		c.Model = "instant"
		c.Memory.ConsumerEnabled = false
	}})
	o := &overheadStack{model: hs.Model, orchAddr: hs.App.Addr(), addrs: map[string]string{}}
	for t, a := range hs.Apps {
		o.addrs[t] = a.Addr()
	}
	return o
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// BenchmarkTurnOverhead measures the framework's own cost of a turn — user message stored,
// context built, memories recalled, tools selected, a model call that asks for a builtin tool,
// the tool run, the step stored, a second model call, the answer stored, the record written and
// turn.finished published — with a scripted model that answers instantly. It compares the turn
// with the bare round trips the turn needs (the same count of trivial gRPC health checks and
// HTTP model calls), and with the same service calls made directly by a client.
func BenchmarkTurnOverhead(b *testing.B) {
	for _, micro := range []bool{false, true} {
		name := "monolithic"
		if micro {
			name = "microservices"
		}
		b.Run(name, func(b *testing.B) {
			o := startOverhead(b, micro)
			conn, err := rpc.Dial(o.orchAddr)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			dial := func(addr string) *grpc.ClientConn {
				c, err := rpc.Dial(addr)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = c.Close() })
				return c
			}
			sessConn := dial(o.addrs[app.TargetSession])
			toolsConn := dial(o.addrs[app.TargetTools])
			memConn := dial(o.addrs[app.TargetMemory])
			orch := orchestratorv1.NewOrchestratorServiceClient(conn)
			sess := sessionv1.NewSessionServiceClient(sessConn)
			tools := toolsv1.NewToolServiceClient(toolsConn)
			mem := memoryv1.NewMemoryServiceClient(memConn)
			health := healthpb.NewHealthClient(conn)
			mc, err := model.New(model.Config{BaseURL: o.model.URL(), Model: "instant"})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			// createSession and runTurn return their errors, for the client goroutines below;
			// newSession and turn fail the benchmark, on its own goroutine.
			createSession := func() (string, error) {
				r, err := sess.CreateSession(ctx, &sessionv1.CreateSessionRequest{UserId: "bench"})
				return r.GetSession().GetId(), err
			}
			runTurn := func(sid string) error {
				res, err := demo.RunTurn(ctx, orch, &orchestratorv1.RunTurnRequest{SessionId: sid, UserId: "bench", Text: "what time is it?"}, nil)
				switch {
				case err != nil:
					return fmt.Errorf("turn: %w", err)
				case res.Completed == nil:
					return fmt.Errorf("turn did not complete: %v", res.Failed)
				}
				return nil
			}
			newSession := func() string {
				sid, err := createSession()
				if err != nil {
					b.Fatal(err)
				}
				return sid
			}
			turn := func(sid string) {
				if err := runTurn(sid); err != nil {
					b.Fatal(err)
				}
			}
			// The RPCs and model calls of one turn, made directly.
			direct := func(sid string) {
				msg := func(m ...*sessionv1.NewMessage) {
					if _, err := sess.AppendMessages(ctx, &sessionv1.AppendMessagesRequest{SessionId: sid, UserId: "bench", Messages: m}); err != nil {
						b.Fatal(err)
					}
				}
				msg(&sessionv1.NewMessage{Role: sessionv1.Role_ROLE_USER, Content: "what time is it?"})
				if _, err := sess.BuildContext(ctx, &sessionv1.BuildContextRequest{SessionId: sid, UserId: "bench"}); err != nil {
					b.Fatal(err)
				}
				if _, err := tools.SelectTools(ctx, &toolsv1.SelectToolsRequest{Text: "what time is it?"}); err != nil {
					b.Fatal(err)
				}
				if _, err := mem.Recall(ctx, &memoryv1.RecallRequest{UserId: "bench", Query: "what time is it?"}); err != nil {
					b.Fatal(err)
				}
				req := model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "what time is it?"}}}
				if _, err := mc.Stream(ctx, req, nil); err != nil {
					b.Fatal(err)
				}
				if _, err := tools.ExecuteTool(ctx, &toolsv1.ExecuteToolRequest{Name: "current_time", Arguments: `{}`}); err != nil {
					b.Fatal(err)
				}
				msg(&sessionv1.NewMessage{Role: sessionv1.Role_ROLE_ASSISTANT, Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL, ToolCallId: "c", ToolName: "current_time", Content: `{}`},
					&sessionv1.NewMessage{Role: sessionv1.Role_ROLE_TOOL, Kind: sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT, ToolCallId: "c", ToolName: "current_time", Content: `{}`})
				if _, err := mc.Stream(ctx, req, nil); err != nil {
					b.Fatal(err)
				}
				msg(&sessionv1.NewMessage{Role: sessionv1.Role_ROLE_ASSISTANT, Content: "It is now."})
			}
			// A turn needs 1 RunTurn + 3 AppendMessages + BuildContext + SelectTools + Recall +
			// ExecuteTool = 8 gRPC round trips, and 2 model HTTP calls.
			bare := func() {
				for range 8 {
					if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
						b.Fatal(err)
					}
				}
				for range 2 {
					r, err := http.Get(strings.TrimSuffix(o.model.URL(), "/v1") + "/v1/models")
					if err != nil {
						b.Fatal(err)
					}
					r.Body.Close()
				}
			}
			measure := func(n int, f func(i int)) []time.Duration {
				d := make([]time.Duration, n)
				for i := range n {
					start := time.Now()
					f(i)
					d[i] = time.Since(start)
				}
				return d
			}
			// Warm up connections, tokenizer and caches.
			sid := newSession()
			for range 5 {
				turn(sid)
				direct(newSession())
				bare()
			}
			n := max(b.N, 50)
			b.ResetTimer()
			var sessions []string
			turns := measure(n, func(i int) {
				// A fresh session every 10 turns keeps the window below eviction, so every
				// turn is the same shape (no summary call).
				if i%10 == 0 {
					b.StopTimer()
					sessions = append(sessions, newSession())
					b.StartTimer()
				}
				turn(sessions[len(sessions)-1])
			})
			b.StopTimer()
			directs := measure(n, func(i int) {
				if i%10 == 0 {
					sessions = append(sessions, newSession())
				}
				direct(sessions[len(sessions)-1])
			})
			bares := measure(n, func(int) { bare() })

			// Throughput with 4 clients at once.
			const clients, perClient = 4, 15
			var g errgroup.Group
			start := time.Now()
			for range clients {
				g.Go(func() error {
					var sid string
					for j := range perClient {
						if j%10 == 0 {
							var err error
							if sid, err = createSession(); err != nil {
								return err
							}
						}
						if err := runTurn(sid); err != nil {
							return err
						}
					}
					return nil
				})
			}
			if err := g.Wait(); err != nil {
				b.Fatal(err)
			}
			parallel := float64(clients*perClient) / time.Since(start).Seconds()

			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
			p50, p99 := percentile(turns, 0.5), percentile(turns, 0.99)
			var sum time.Duration
			for _, d := range turns {
				sum += d
			}
			b.ReportMetric(ms(p50), "p50-ms")
			b.ReportMetric(ms(p99), "p99-ms")
			b.ReportMetric(float64(len(turns))/sum.Seconds(), "turns/s")
			b.ReportMetric(parallel, "turns/s-4clients")
			b.ReportMetric(ms(percentile(bares, 0.5)), "bare-p50-ms")
			b.ReportMetric(ms(percentile(directs, 0.5)), "direct-p50-ms")
			b.ReportMetric(float64(p50)/float64(percentile(bares, 0.5)), "x-bare")
			b.ReportMetric(float64(p50)/float64(percentile(directs, 0.5)), "x-direct")
			if os.Getenv("HERMES_BENCH_VERBOSE") != "" {
				b.Logf("%s: turn p50 %s p99 %s; bare p50 %s; direct p50 %s", name, p50, p99, percentile(bares, 0.5), percentile(directs, 0.5))
			}
		})
	}
}
