package multiprocess

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/hermes-agent/hermes/app/demo"
	"github.com/hermes-agent/hermes/app/demo/restaurant"
	"github.com/hermes-agent/hermes/internal/events"
	"github.com/hermes-agent/hermes/internal/testenv"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
	"github.com/hermes-agent/hermes/services/memory"
	"github.com/hermes-agent/hermes/test/multiprocess/cluster"
)

const (
	serving    = healthpb.HealthCheckResponse_SERVING
	notServing = healthpb.HealthCheckResponse_NOT_SERVING
)

// wait returns every outcome once the workers have run out of turns.
func (l *load) wait(t *testing.T, timeout time.Duration) []turnOutcome {
	t.Helper()
	select {
	case <-l.done:
	case <-time.After(timeout):
		t.Fatalf("the load did not finish within %s; so far:\n%s", timeout, l.summary(20))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]turnOutcome(nil), l.outcomes...)
}

func rate(n int, d time.Duration) string {
	return fmt.Sprintf("%.1f turns/s", float64(n)/d.Seconds())
}

// TestMemoryKilledUnderLoad kills the memory process with SIGKILL while turns keep coming,
// starts it again, and checks that every turn succeeded (recall degrades while memory is down)
// and that every turn.finished was processed exactly once in effect: each turn's user (one per
// turn) ends with exactly one memory, drawn from that turn, and nothing was dead-lettered.
func TestMemoryKilledUnderLoad(t *testing.T) {
	ctx := context.Background()
	// Extractions take 300 ms each, so a backlog of unacknowledged turn.finished events is in
	// flight when the process dies.
	// The dead process's claims on the turns it was extracting last for
	// max(ack wait, extract timeout x attempts) — 60 s by default; with a 2 s extraction timeout
	// (the scripted model answers in 300 ms) they last 4 s, so the test does not wait a minute.
	s := newStack(t, stackOptions{
		model: cluster.ModelOptions{ExtractDelay: 300 * time.Millisecond},
		env:   []string{"HERMES_MEMORY_EXTRACT_TIMEOUT=2s"},
	})
	const total, workers = 48, 4
	run := randomID()
	type turnSpec struct{ session, user, member string }
	specs := make([]turnSpec, total)
	for k := range specs {
		user := fmt.Sprintf("mem-%s-%02d", run, k)
		specs[k] = turnSpec{session: s.createSession(ctx, user, "load"), user: user, member: fmt.Sprintf("M%s%02d", run, k)}
	}
	// The turns after the first killAfter wait for the kill, and the restart waits for
	// restartAfter turns to complete, so at least restartAfter-killAfter turns start and end
	// while the process is down however fast the machine runs the turns (polling alone let a
	// fast run finish its turns before the kill landed).
	const killAfter, restartAfter = 12, 28
	killed := make(chan struct{})
	loadCtx, stopLoad := context.WithCancel(ctx)
	var next atomic.Int64
	begin := time.Now()
	l := startLoad(t, loadCtx, s.orchestrator, workers, func(_, _ int) (string, string, string) {
		k := int(next.Add(1)) - 1
		if k >= total {
			return "", "", ""
		}
		if k >= killAfter {
			select {
			case <-killed:
			case <-loadCtx.Done():
				return "", "", ""
			}
		}
		sp := specs[k]
		return sp.session, sp.user, cluster.LoadTurn(fmt.Sprintf("%d*7", k), sp.member)
	})
	t.Cleanup(stopLoad) // runs before startLoad's cleanup, which waits for the workers

	mem := s.c.Proc("memory")
	l.waitCompleted(t, killAfter, 60*time.Second)
	if err := mem.Kill(); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	close(killed)
	l.waitCompleted(t, restartAfter, 60*time.Second)
	if err := mem.Start(); err != nil {
		t.Fatal(err)
	}
	restartedAt := time.Now()
	if err := mem.WaitServing(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	servingAt := time.Now()
	outs := l.wait(t, 120*time.Second)
	elapsed := time.Since(begin)

	var failed []turnOutcome
	degraded := 0
	var lastDegraded time.Time
	byUser := map[string]turnOutcome{}
	for _, o := range outs {
		if !o.ok() {
			failed = append(failed, o)
		}
		if o.recallErr != "" {
			degraded++
			if o.started.After(lastDegraded) {
				lastDegraded = o.started
			}
		}
		byUser[o.user] = o
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d turns failed while the memory process was killed and restarted:\n%s", len(failed), len(outs), summarize(failed, 20))
	}
	if len(outs) != total {
		t.Fatalf("%d turns ran, want %d", len(outs), total)
	}
	duringOutage := 0
	for _, o := range outs {
		if o.started.After(killedAt) && o.started.Before(restartedAt) {
			duringOutage++
		}
	}
	if duringOutage == 0 {
		t.Fatal("no turn started while the memory process was down: the fault did not happen under load")
	}

	// Every turn.finished, exactly once in effect: one memory per user, from that turn.
	var problems []string
	testenv.Poll(90*time.Second, func() bool {
		problems = problems[:0]
		for _, sp := range specs {
			o := byUser[sp.user]
			resp, err := s.memory.ListMemories(ctx, &memoryv1.ListMemoriesRequest{UserId: sp.user})
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: ListMemories: %v", sp.user, err))
				continue
			}
			ms := resp.GetMemories()
			switch {
			case len(ms) == 0:
				problems = append(problems, fmt.Sprintf("%s (turn %s): no memory yet", sp.user, o.turnID))
			case len(ms) > 1:
				problems = append(problems, fmt.Sprintf("%s (turn %s): %d memories, want 1 (duplicate extraction): %v", sp.user, o.turnID, len(ms), ms))
			case ms[0].GetTurnId() != o.turnID || ms[0].GetContent() != cluster.MemberContent(sp.member):
				problems = append(problems, fmt.Sprintf("%s: memory %q from turn %s, want %q from turn %s", sp.user, ms[0].GetContent(), ms[0].GetTurnId(), cluster.MemberContent(sp.member), o.turnID))
			}
		}
		return len(problems) == 0
	})
	t.Logf("every turn processed %s after the load ended", time.Since(begin.Add(elapsed)).Round(time.Millisecond))
	if len(problems) > 0 {
		t.Fatalf("after the memory process came back, %d of %d turns are not processed exactly once:\n  %s", len(problems), total, strings.Join(problems, "\n  "))
	}

	// The stream holds each turn.finished once (published with the turn id as Nats-Msg-Id) and
	// no dead letter.
	_, js, err := events.Connect(s.natsURL, "hermes-multiprocess-check", nil)
	if err != nil {
		t.Fatal(err)
	}
	names := events.NamespacedNames(s.ns)
	if n, err := streamCount(ctx, js, names.Stream, names.TurnFinishedFilter()); err != nil || n != total {
		t.Errorf("turn.finished events in the stream: %d (%v), want %d", n, err, total)
	}
	if n, err := streamCount(ctx, js, names.Stream, names.DeadLetterFilter()); err != nil || n != 0 {
		t.Errorf("dead letters: %d (%v), want 0", n, err)
	}
	if lastDegraded.After(servingAt) {
		t.Logf("turns started up to %s after memory was SERVING again still could not recall (the orchestrator's connection was still backing off)", lastDegraded.Sub(servingAt).Round(time.Millisecond))
	}
	redelivered := extractionsPerMember(s, "M"+run)
	t.Logf("load held: %d turns by %d workers in %s (%s), %d started while memory was down (%d recalled nothing because memory was unreachable), 0 failed; memory down for %s; each of %d turn.finished processed once in effect, %d extraction model calls (%d repeated after the kill), 0 dead letters",
		len(outs), workers, elapsed.Round(time.Millisecond), rate(len(outs), elapsed), duringOutage, degraded,
		restartedAt.Sub(killedAt).Round(time.Millisecond), total, redelivered.calls, redelivered.calls-redelivered.distinct)
}

type extractionCount struct{ calls, distinct int }

// extractionsPerMember counts the scripted model's extraction requests for load turns whose
// member id starts with prefix.
func extractionsPerMember(s *stack, prefix string) extractionCount {
	re := regexp.MustCompile(`我的会员编号是 (` + regexp.QuoteMeta(prefix) + `[0-9]+)。`)
	seen := map[string]bool{}
	var c extractionCount
	for _, r := range s.model.Requests() {
		if len(r.Messages) == 0 || r.Messages[0].Content != memory.ExtractionSystemPrompt {
			continue
		}
		if m := re.FindStringSubmatch(r.LastUser()); m != nil {
			c.calls++
			seen[m[1]] = true
		}
	}
	c.distinct = len(seen)
	return c
}

// TestRedisRestartUnderLoad kills the (dedicated) Redis with SIGKILL under load and starts it
// again on the same data: while it is down, the services that need it report NOT_SERVING and
// the turns fail with UNAVAILABLE and a message that says what is down; once it is back they
// report SERVING by themselves and every later turn succeeds; and no acknowledged message is
// missing or duplicated in any session's log.
func TestRedisRestartUnderLoad(t *testing.T) {
	ctx := context.Background()
	// Each model step takes 100 ms, so turns are in flight when Redis dies.
	s := newStack(t, stackOptions{dedicatedRedis: true, model: cluster.ModelOptions{Delay: 100 * time.Millisecond}})
	const workers = 4
	run := randomID()
	sessions := make([]string, workers)
	users := make([]string, workers)
	for w := range workers {
		users[w] = fmt.Sprintf("redis-%s-%d", run, w)
		sessions[w] = s.createSession(ctx, users[w], "load")
	}
	begin := time.Now()
	l := startLoad(t, ctx, s.orchestrator, workers, func(w, i int) (string, string, string) {
		return sessions[w], users[w], cluster.LoadTurn(fmt.Sprintf("%d*%d", w+1, i+2), fmt.Sprintf("R%s-%d-%d", run, w, i))
	})
	l.waitCompleted(t, 12, 60*time.Second)

	// Down: every service says so on its health check (the gateway keeps its server registry in
	// Redis too).
	s.redis.Kill()
	killedAt := time.Now()
	dependants := []string{"session", "tools", "mcpgateway", "memory", "orchestrator"}
	s.waitHealth(ctx, notServing, 15*time.Second, dependants...)
	notServingAfter := time.Since(killedAt)
	// The overall status follows the process's services (liveness is /livez on the health
	// port, which a backend outage does not fail).
	for _, p := range s.c.Procs {
		if st, err := p.Health(ctx, ""); err != nil || st != notServing {
			t.Errorf("%s: overall health is %s (%v) while Redis is down, want NOT_SERVING", p.Name, st, err)
		}
	}
	// Keep Redis down until turns have failed: the services retry a refused call (go-redis,
	// then gRPC between the services), so a short outage is ridden out and no turn fails.
	testenv.Poll(20*time.Second, func() bool { return time.Since(killedAt) >= 3*time.Second && l.failedCount() >= 2 })

	// Back: SERVING again without anyone restarting the services.
	if err := s.redis.Start(); err != nil {
		t.Fatal(err)
	}
	restartedAt := time.Now()
	s.waitHealth(ctx, serving, 20*time.Second, dependants...)
	healedAt := time.Now()
	before := l.completed()
	l.waitCompleted(t, before+12, 60*time.Second)
	outs := l.finish()
	elapsed := time.Since(begin)

	var failed, late []turnOutcome
	var unclear []string
	for _, o := range outs {
		if o.ok() {
			continue
		}
		failed = append(failed, o)
		if o.started.After(healedAt) {
			late = append(late, o)
		}
		if o.failCode != "UNAVAILABLE" {
			unclear = append(unclear, fmt.Sprintf("%s (want UNAVAILABLE)", o))
		} else if m := strings.ToLower(o.failMsg); !strings.Contains(m, "redis") && !strings.Contains(m, "unavailable") {
			unclear = append(unclear, fmt.Sprintf("%s (the message does not say what is unavailable)", o))
		}
	}
	if len(late) > 0 {
		t.Errorf("%d turns started after Redis was back and the services SERVING failed:\n%s", len(late), summarize(late, 20))
	}
	if len(unclear) > 0 {
		t.Errorf("%d turns failed other than with UNAVAILABLE and a clear message:\n  %s", len(unclear), strings.Join(unclear, "\n  "))
	}
	if len(failed) == 0 {
		t.Errorf("no turn failed while Redis was down for %s: the fault did not hit the load", restartedAt.Sub(killedAt))
	}
	examples := map[string]bool{}
	for _, o := range failed {
		if len(examples) < 3 {
			examples[o.failMsg] = true
		}
	}
	for m := range examples {
		t.Logf("a turn in flight failed with UNAVAILABLE: %s", m)
	}

	// The session logs: every acknowledged message exactly once, nothing else twice.
	byUser := map[string][]turnOutcome{}
	for _, o := range outs {
		byUser[o.user] = append(byUser[o.user], o)
	}
	checked := 0
	for w := range workers {
		msgs, err := s.listMessages(ctx, sessions[w], users[w])
		if err != nil {
			t.Fatalf("ListMessages of %s: %v", sessions[w], err)
		}
		for _, p := range checkLog(msgs, byUser[users[w]]) {
			t.Errorf("session %s: %s", sessions[w], p)
		}
		checked += len(msgs)
	}
	t.Logf("load held: %d turns by %d workers in %s (%s): %d completed, %d failed with UNAVAILABLE while Redis was down for %s; dependants NOT_SERVING %s after the kill, SERVING %s after the restart; %d messages in %d session logs checked: none missing, none duplicated",
		len(outs), workers, elapsed.Round(time.Millisecond), rate(len(outs)-len(failed), elapsed), len(outs)-len(failed), len(failed),
		restartedAt.Sub(killedAt).Round(time.Millisecond), notServingAfter.Round(time.Millisecond), healedAt.Sub(restartedAt).Round(time.Millisecond), checked, workers)
}

// checkLog compares a session's log with what the client was told: the sequence numbers are
// dense from 1; every acknowledged user message (TurnStarted) and assistant answer
// (TurnCompleted) is at its sequence number with its text; no user text, tool call or tool
// result appears twice; and every completed turn's tool calls have their results.
func checkLog(msgs []*sessionv1.Message, outs []turnOutcome) []string {
	var problems []string
	bySeq := map[int64]*sessionv1.Message{}
	userTexts := map[string]int{}
	userMsgs := map[string][]string{}
	calls, results := map[string]int{}, map[string]int{}
	for i, m := range msgs {
		if m.GetSeq() != int64(i+1) {
			problems = append(problems, fmt.Sprintf("message %d has seq %d: the log is not dense", i+1, m.GetSeq()))
		}
		bySeq[m.GetSeq()] = m
		switch {
		case m.GetRole() == sessionv1.Role_ROLE_USER:
			userTexts[m.GetContent()]++
			userMsgs[m.GetContent()] = append(userMsgs[m.GetContent()], fmt.Sprintf("#%d client_id=%s", m.GetSeq(), m.GetClientId()))
		case m.GetKind() == sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL:
			calls[m.GetToolCallId()]++
		case m.GetKind() == sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT:
			results[m.GetToolCallId()]++
		}
	}
	for text, n := range userTexts {
		if n > 1 {
			problems = append(problems, fmt.Sprintf("user message %q is stored %d times: %v", text, n, userMsgs[text]))
		}
	}
	for id, n := range calls {
		if n > 1 {
			problems = append(problems, fmt.Sprintf("tool call %s is stored %d times", id, n))
		}
	}
	for id, n := range results {
		if n > 1 {
			problems = append(problems, fmt.Sprintf("tool result %s is stored %d times", id, n))
		}
	}
	for _, o := range outs {
		if o.userSeq > 0 {
			if m := bySeq[o.userSeq]; m == nil || m.GetRole() != sessionv1.Role_ROLE_USER || m.GetContent() != o.text {
				problems = append(problems, fmt.Sprintf("acknowledged user message #%d (turn %s) is missing or different: %v", o.userSeq, o.turnID, m))
			}
		}
		if !o.ok() {
			continue
		}
		m := bySeq[o.answerSeq]
		if m == nil || m.GetRole() != sessionv1.Role_ROLE_ASSISTANT || m.GetContent() != o.answer {
			problems = append(problems, fmt.Sprintf("acknowledged answer #%d (turn %s) is missing or different: %v", o.answerSeq, o.turnID, m))
		}
		for seq := o.userSeq + 1; seq < o.answerSeq; seq++ {
			if c := bySeq[seq]; c != nil && c.GetKind() == sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL && results[c.GetToolCallId()] != 1 {
				problems = append(problems, fmt.Sprintf("tool call %s of completed turn %s has no result", c.GetToolCallId(), o.turnID))
			}
		}
	}
	return problems
}

// TestMCPServerKilled kills the restaurant MCP server while turns keep coming: its tools answer
// `unavailable` promptly (no timeout), the other tools keep working and the load holds, and
// once the server is back on its address its tools work again.
func TestMCPServerKilled(t *testing.T) {
	ctx := context.Background()
	// Pinged every second, a dead server is noticed between calls too.
	s := newStack(t, stackOptions{env: []string{"HERMES_MCPGATEWAY_PING_INTERVAL=1s"}})
	rest := s.addRestaurant(ctx, "")
	addr := strings.TrimSuffix(strings.TrimPrefix(rest.URL(), "http://"), "/mcp")
	search := func() (*toolsv1.ToolResult, time.Duration, error) {
		start := time.Now()
		resp, err := s.tools.ExecuteTool(ctx, &toolsv1.ExecuteToolRequest{Name: "locallife_search_restaurant", Arguments: `{"restaurant_name":"蜀香园"}`})
		return resp.GetResult(), time.Since(start), err
	}
	if r, _, err := search(); err != nil || !r.GetSuccess() {
		t.Fatalf("search before the kill: %v %v", r, err)
	}

	const workers = 2
	run := randomID()
	sessions := make([]string, workers)
	for w := range workers {
		sessions[w] = s.createSession(ctx, fmt.Sprintf("mcp-%s-%d", run, w), "load")
	}
	begin := time.Now()
	l := startLoad(t, ctx, s.orchestrator, workers, func(w, i int) (string, string, string) {
		return sessions[w], fmt.Sprintf("mcp-%s-%d", run, w), cluster.LoadTurn(fmt.Sprintf("%d+%d", w, i), fmt.Sprintf("C%s-%d-%d", run, w, i))
	})
	l.waitCompleted(t, 4, 60*time.Second)

	t.Logf("killing the MCP server at %s", time.Now().UTC().Format("15:04:05.000"))
	rest.Close()
	// The MCP tool: unavailable, at once and again on the next calls.
	var worst time.Duration
	for range 3 {
		r, d, err := search()
		if err != nil {
			t.Fatalf("ExecuteTool of the dead server's tool is an RPC error, want a tool result: %v", err)
		}
		if r.GetSuccess() || r.GetError().GetCode() != toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE {
			t.Fatalf("the dead server's tool answered %v, want success=false with code UNAVAILABLE", r)
		}
		worst = max(worst, d)
	}
	// Promptly: well inside the tool's 10 s timeout, with room for a loaded 2-core machine.
	if worst > 5*time.Second {
		t.Errorf("the dead server's tool took %s to answer unavailable, want well under its 10 s timeout", worst)
	}
	t.Logf("the dead MCP server's tool answered unavailable in at most %s (timeout 10 s): %s", worst.Round(time.Millisecond), func() string { r, _, _ := search(); return r.GetError().GetMessage() }())
	// Other tools keep working.
	calc, err := s.tools.ExecuteTool(ctx, &toolsv1.ExecuteToolRequest{Name: "calculator", Arguments: `{"expression":"6*7"}`})
	if err != nil || !calc.GetResult().GetSuccess() || !strings.Contains(calc.GetResult().GetOutput(), `"result":42`) {
		t.Errorf("calculator while the MCP server is dead: %v %v", calc.GetResult(), err)
	}
	// A turn that needs the dead tool completes and reports it unavailable.
	sess := s.createSession(ctx, demo.User+"-"+run, "查餐厅")
	o := runTurn(ctx, s.orchestrator, sess, demo.User+"-"+run, demo.FirstMessage)
	if !o.ok() {
		t.Fatalf("a restaurant turn while the MCP server is dead: %s", o)
	}
	if len(o.calls) == 0 || o.calls[0].GetSuccess() || o.calls[0].GetErrorCode() != "unavailable" {
		t.Errorf("the restaurant turn's tool call: %v, want a failed call with error_code unavailable", o.calls)
	}

	// Back on the same address: the gateway reconnects by itself.
	back, err := restaurant.Listen(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(back.Close)
	backAt := time.Now()
	t.Logf("MCP server back at %s", backAt.UTC().Format("15:04:05.000"))
	var r *toolsv1.ToolResult
	if !testenv.Poll(30*time.Second, func() bool {
		r, _, err = search()
		return err == nil && r.GetSuccess()
	}) {
		t.Fatalf("30 s after the MCP server came back its tool still fails: %v %v", r, err)
	}
	recovered := time.Since(backAt)
	outs := l.finish()
	elapsed := time.Since(begin)
	var failed []turnOutcome
	for _, o := range outs {
		if !o.ok() {
			failed = append(failed, o)
		}
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d load turns (calculator) failed while the MCP server was dead:\n%s", len(failed), len(outs), summarize(failed, 10))
	}
	t.Logf("load held: %d calculator turns by %d workers in %s (%s), 0 failed; the MCP tool worked again %s after the server came back",
		len(outs), workers, elapsed.Round(time.Millisecond), rate(len(outs), elapsed), recovered.Round(time.Millisecond))
}
