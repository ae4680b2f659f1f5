package multiprocess

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/hermes-agent/hermes/internal/boltstore"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	"github.com/hermes-agent/hermes/internal/testenv"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	"github.com/hermes-agent/hermes/services/session"
	"github.com/hermes-agent/hermes/test/multiprocess/cluster"
)

// sessionLease is the orchestrator's session lease (services/orchestrator): a turn whose
// orchestrator died shows INTERRUPTED at most this long (plus a sweep) after the death.
const sessionLease = 15 * time.Second

// startHangingTurn starts a turn that the model does not answer and returns its id once the
// client has TurnStarted; the stream stays open (the orchestrator is killed under it).
func startHangingTurn(t *testing.T, ctx context.Context, c orchestratorv1.OrchestratorServiceClient, session, user, text string) string {
	t.Helper()
	stream, err := c.RunTurn(ctx, &orchestratorv1.RunTurnRequest{SessionId: session, UserId: user, Text: text})
	if err != nil {
		t.Fatalf("RunTurn: %v", err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("RunTurn stream ended before TurnStarted: %v", err)
		}
		if st := resp.GetEvent().GetStarted(); st != nil {
			return st.GetTurnId()
		}
	}
}

// waitInterrupted polls GetTurn until the turn is no longer RUNNING and checks it is
// INTERRUPTED within the session lease plus a few seconds of killed.
func waitInterrupted(t *testing.T, c orchestratorv1.OrchestratorServiceClient, user, turnID string, killed time.Time) {
	t.Helper()
	var rec *orchestratorv1.Turn
	testenv.WaitFor(t, sessionLease+60*time.Second, "turn "+turnID+" ends", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := c.GetTurn(ctx, &orchestratorv1.GetTurnRequest{TurnId: turnID, UserId: user})
		if err != nil {
			t.Logf("GetTurn(%s): %v", turnID, err)
			return false
		}
		rec = resp.GetTurn()
		return rec.GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_RUNNING
	})
	took := time.Since(killed)
	t.Logf("turn %s: %s %s after kill -9", turnID, rec.GetStatus(), took.Round(time.Millisecond))
	if rec.GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_INTERRUPTED {
		t.Errorf("turn %s ended %s, want INTERRUPTED", turnID, rec.GetStatus())
	}
	if took > sessionLease+10*time.Second {
		t.Errorf("turn %s showed INTERRUPTED %s after the kill; want within the session lease (%s) plus 10s", turnID, took, sessionLease)
	}
}

// TestKillMidTurnMonolith: `hermes serve` (one process, bbolt stores) is killed with SIGKILL
// while six turns wait for the model, and started again on the same data directory: every turn
// whose id the client had is found, INTERRUPTED, and its session takes a new turn. It runs with
// the sessions in one file and spread over three (session.files).
func TestKillMidTurnMonolith(t *testing.T) {
	t.Run("one file", func(t *testing.T) { testKillMidTurnMonolith(t, 1) })
	t.Run("three files", func(t *testing.T) { testKillMidTurnMonolith(t, 3) })
}

func testKillMidTurnMonolith(t *testing.T, files int) {
	ctx := context.Background()
	model, err := scripted.New(func(req scripted.Request) scripted.Reply {
		if req.LastUser() == "hang" {
			return scripted.Reply{Text: "too late", Delay: 10 * time.Minute}
		}
		return scripted.Text("ok")
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(model.Close)
	dir := t.TempDir()
	p, sessions, orch := startMonolith(t, dir, model.URL(), "scripted-orphans", fmt.Sprintf("HERMES_SESSION_FILES=%d", files))

	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type started struct{ session, turn string }
	var turns []started
	inFile := map[int]bool{}
	for i := range 6 {
		resp, err := sessions.CreateSession(ctx, &sessionv1.CreateSessionRequest{UserId: "alice", Title: "orphan " + string(rune('a'+i))})
		if err != nil {
			t.Fatalf("CreateSession: %v", err)
		}
		sid := resp.GetSession().GetId()
		inFile[boltstore.FileOf(sid, files)] = true
		turns = append(turns, started{sid, startHangingTurn(t, tctx, orch, sid, "alice", "hang")})
	}
	if files > 1 && len(inFile) < 2 {
		t.Logf("the six sessions are all in one file of %d", files)
	}
	killed := restartAfterKill(t, p, cancel)
	for _, st := range turns {
		waitInterrupted(t, orch, "alice", st.turn, killed)
	}
	for _, st := range turns {
		checkNextTurn(t, orch, st.session, "alice")
	}
	for i := range files {
		if _, err := os.Stat(filepath.Join(dir, "data", "all", session.FileName(i))); err != nil {
			t.Errorf("file %d of %d: %v", i, files, err)
		}
	}
	// The embedded store's writer has counted the restarted process's commits.
	body, err := scrape(p.MetricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	if !hasSample(body, `hermes_boltstore_writer_busy_seconds_total`) {
		t.Errorf("the monolith's /metrics has no sample of hermes_boltstore_writer_busy_seconds_total:\n%s", head(body, 2000))
	}
}

// startMonolith starts `hermes serve` on dir with the model at modelURL and env, and returns it
// (its log goes into a failed test's output; it stops with the test) with clients of its
// session and orchestrator services.
func startMonolith(t *testing.T, dir, modelURL, modelName string, env ...string) (*cluster.Process, sessionv1.SessionServiceClient, orchestratorv1.OrchestratorServiceClient) {
	t.Helper()
	p, err := cluster.StartMonolith(context.Background(), hermesBin, dir, modelURL, modelName, env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log:\n%s", p.Log(12000))
		}
		p.Close()
	})
	conn, err := grpc.NewClient(p.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return p, sessionv1.NewSessionServiceClient(conn), orchestratorv1.NewOrchestratorServiceClient(conn)
}

// restartAfterKill kills p with SIGKILL, cancels the clients' calls, starts it again on its data
// and waits until it serves; it returns when p was killed.
func restartAfterKill(t *testing.T, p *cluster.Process, cancel context.CancelFunc) time.Time {
	t.Helper()
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	cancel()
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitServing(context.Background(), 60*time.Second); err != nil {
		t.Fatal(err)
	}
	return killed
}

// checkNextTurn runs a turn in the session and checks it completes.
func checkNextTurn(t *testing.T, c orchestratorv1.OrchestratorServiceClient, session, user string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if o := runTurn(ctx, c, session, user, "你好"); !o.ok() {
		t.Errorf("the session's next turn: %v", o)
	}
}

// TestKillMidTurnReplicas: two orchestrator replicas on Redis; the one running a turn is killed
// with SIGKILL; the other finds the turn (its session lease lapsed) and ends it INTERRUPTED.
func TestKillMidTurnReplicas(t *testing.T) {
	s := newStack(t, stackOptions{orchestrators: 2, model: cluster.ModelOptions{Delay: 10 * time.Minute}})
	ctx := context.Background()
	sid := s.createSession(ctx, "bob", "orphan")
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	turnID := startHangingTurn(t, tctx, s.orchestrator, sid, "bob", cluster.LoadTurn("1+1", "M1"))
	if err := s.c.Proc("orchestrator").Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	cancel()
	conn, err := grpc.NewClient(s.c.Proc("orchestrator-2").Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	other := orchestratorv1.NewOrchestratorServiceClient(conn)
	waitInterrupted(t, other, "bob", turnID, killed)
	checkNextTurn(t, other, sid, "bob")
}
