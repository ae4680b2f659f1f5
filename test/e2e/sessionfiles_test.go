package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hermes-agent/hermes/app"
	"github.com/hermes-agent/hermes/app/demo"
	"github.com/hermes-agent/hermes/internal/boltstore"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	"github.com/hermes-agent/hermes/services/session"
	"github.com/hermes-agent/hermes/test/hermestest"
)

// TestSessionFilesMonolith: a monolith whose sessions are spread over three files (session.files)
// answers through its API as one file would: turns in sessions of every file, each turn's record
// and its session's turns, a user's sessions page by page newest first, and searches across them.
func TestSessionFilesMonolith(t *testing.T) {
	dir := t.TempDir()
	h := func(req scripted.Request) scripted.Reply { return scripted.Text("noted: " + req.LastUser()) }
	hs := hermestest.Start(t, hermestest.Options{
		Layout: hermestest.Monolith, Model: h, Args: []string{hermestest.AllowLoopback}, DataDir: dir,
		Configure: func(c *app.Config) { c.Session.Files = 3 },
	})
	for i := range 3 {
		if _, err := os.Stat(filepath.Join(dir, session.FileName(i))); err != nil {
			t.Fatalf("file %d of 3: %v", i, err)
		}
	}
	ctx := context.Background()
	words := []string{"harbour", "quilt", "meteor", "saffron", "lantern", "glacier", "琵琶", "杏仁", "灯塔", "冰川", "丝绸", "雷雨"}
	var sids []string
	inFile := map[int]int{}
	for i, w := range words {
		resp, err := hs.Sessions.CreateSession(ctx, &sessionv1.CreateSessionRequest{UserId: "ana", Title: w})
		if err != nil {
			t.Fatal(err)
		}
		sid := resp.GetSession().GetId()
		sids = append(sids, sid)
		inFile[boltstore.FileOf(sid, 3)]++
		res, err := demo.RunTurn(ctx, hs.Orchestrator, &orchestratorv1.RunTurnRequest{SessionId: sid, UserId: "ana", Text: fmt.Sprintf("remember the %s, number %d", w, i)}, nil)
		if err != nil || res.Completed == nil {
			t.Fatalf("turn in session %d: %v %v", i, err, res.Failed)
		}
		rec, err := hs.Orchestrator.GetTurn(ctx, &orchestratorv1.GetTurnRequest{TurnId: res.Completed.GetTurnId(), UserId: "ana"})
		if err != nil || rec.GetTurn().GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_COMPLETED {
			t.Fatalf("GetTurn of session %d's turn: %v %v", i, rec.GetTurn().GetStatus(), err)
		}
		list, err := hs.Orchestrator.ListTurns(ctx, &orchestratorv1.ListTurnsRequest{SessionId: sid, UserId: "ana"})
		if err != nil || len(list.GetTurns()) != 1 || list.GetTurns()[0].GetId() != res.Completed.GetTurnId() {
			t.Fatalf("ListTurns of session %d: %v %v", i, list.GetTurns(), err)
		}
	}
	if len(inFile) < 2 {
		t.Fatalf("the sessions are all in one file: %v", inFile)
	}

	// Every session took a turn in order, so newest first is the reverse order.
	want := slices.Clone(sids)
	slices.Reverse(want)
	var got []string
	for token := ""; ; {
		resp, err := hs.Sessions.ListSessions(ctx, &sessionv1.ListSessionsRequest{UserId: "ana", PageSize: 5, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range resp.GetSessions() {
			got = append(got, s.GetId())
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ListSessions, pages of 5 (-want +got):\n%s", diff)
	}

	for i, w := range words {
		resp, err := hs.Sessions.SearchMessages(ctx, &sessionv1.SearchMessagesRequest{UserId: "ana", Query: w})
		if err != nil {
			t.Fatal(err)
		}
		var in []string
		for _, hit := range resp.GetHits() {
			in = append(in, hit.GetSessionId())
		}
		// The user's message and the model's answer both have the word.
		if diff := cmp.Diff([]string{sids[i], sids[i]}, in); diff != "" {
			t.Errorf("search for %q (-want +got):\n%s", w, diff)
		}
	}
}
