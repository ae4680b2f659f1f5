package client_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/app"
	"github.com/hermes-agent/hermes/client"
	"github.com/hermes-agent/hermes/internal/devcerts"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	"github.com/hermes-agent/hermes/internal/testenv"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	"github.com/hermes-agent/hermes/test/hermestest"
)

const (
	aliceKey = "sk-alice-0123456789abcdef"
	bobKey   = "sk-bob-0123456789abcdefgh"
)

// testModel is calculatorModel, plus "slow" (a long answer streamed over many seconds) and
// "fail" (an error the client does not retry).
func testModel(req scripted.Request) scripted.Reply {
	switch req.LastUser() {
	case "slow":
		return scripted.Reply{Text: strings.Repeat("and so on ", 200), ChunkDelay: 50 * time.Millisecond}
	case "fail":
		return scripted.Reply{Status: 400, NoRetry: true, Message: "scripted refusal"}
	}
	return calculatorModel(req)
}

// startKeyed starts Hermes with API keys for alice and bob.
func startKeyed(t *testing.T) *hermestest.Stack {
	t.Helper()
	file := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(file, []byte(aliceKey+": alice\n"+bobKey+": bob\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h, err := startHermes(testModel, func(c *app.Config) { c.AuthFile = file })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

func dial(t *testing.T, addr string, opts ...client.Option) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// firstErr runs the turn to its end and returns its first error.
func firstErr(seq func(func(*orchestratorv1.TurnEvent, error) bool)) error {
	for _, err := range seq {
		if err != nil {
			return err
		}
	}
	return nil
}

func TestKeysAndScopes(t *testing.T) {
	h := startKeyed(t)
	ctx := context.Background()
	alice := dial(t, h.App.Addr(), client.WithAPIKey(aliceKey))
	own, err := alice.CreateSession(ctx, "alice's")
	if err != nil {
		t.Fatal(err)
	}
	if own.GetUserId() != "alice" {
		t.Errorf("a session created with alice's key belongs to %q", own.GetUserId())
	}

	noKey := dial(t, h.App.Addr())
	unknown := dial(t, h.App.Addr(), client.WithAPIKey("sk-nobody-0123456789abcdef"))
	bob := dial(t, h.App.Addr(), client.WithAPIKey(bobKey))
	aliceAsBob := dial(t, h.App.Addr(), client.WithAPIKey(aliceKey), client.WithUser("bob"))
	tests := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"no key", func() error { _, err := noKey.CreateSession(ctx, "x"); return err }, codes.Unauthenticated},
		{"no key, turn", func() error { return firstErr(noKey.Turn(ctx, own.GetId(), "What is 1 + 1?")) }, codes.Unauthenticated},
		{"unknown key, listing", func() error {
			for _, err := range unknown.ListSessions(ctx) {
				return err
			}
			return nil
		}, codes.Unauthenticated},
		{"another user's session", func() error { _, err := bob.GetSession(ctx, own.GetId()); return err }, codes.PermissionDenied},
		{"a turn in another user's session", func() error { return firstErr(bob.Turn(ctx, own.GetId(), "What is 1 + 1?")) }, codes.PermissionDenied},
		{"naming another user", func() error { _, err := aliceAsBob.CreateSession(ctx, "x"); return err }, codes.PermissionDenied},
		{"own session", func() error { return firstErr(alice.Turn(ctx, own.GetId(), "What is 1 + 1?")) }, codes.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if got := client.Code(err); got != tt.want {
				t.Fatalf("err = %v (code %s), want %s", err, got, tt.want)
			}
			if status.Code(err) != tt.want {
				t.Errorf("status.Code(%v) = %s, want %s", err, status.Code(err), tt.want)
			}
		})
	}
}

// TestBreakCancelsTurn: leaving the loop at the first piece of text cancels the call, and the
// server records the turn as cancelled by the client; without the cancel the turn would stream
// on for ten seconds and complete.
func TestBreakCancelsTurn(t *testing.T) {
	h := startKeyed(t)
	ctx := context.Background()
	c := dial(t, h.App.Addr(), client.WithAPIKey(aliceKey))
	s, err := c.CreateSession(ctx, "slow")
	if err != nil {
		t.Fatal(err)
	}
	var turnID string
	deltas := 0
	for ev, err := range c.Turn(ctx, s.GetId(), "slow") {
		if err != nil {
			t.Fatal(err)
		}
		if st := ev.GetStarted(); st != nil {
			turnID = st.GetTurnId()
		}
		if ev.GetDelta() != nil {
			deltas++
			break
		}
	}
	if turnID == "" || deltas != 1 {
		t.Fatalf("turn %q, %d deltas before the break; want a started turn and one delta", turnID, deltas)
	}
	var turn *orchestratorv1.Turn
	testenv.WaitFor(t, 30*time.Second, "the turn to end", func() bool {
		resp, err := c.Orchestrator.GetTurn(ctx, &orchestratorv1.GetTurnRequest{TurnId: turnID})
		if err != nil {
			t.Fatal(err)
		}
		turn = resp.GetTurn()
		return turn.GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_RUNNING
	})
	if turn.GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_CANCELLED {
		t.Errorf("after the loop broke the turn is %s, want CANCELLED", turn.GetStatus())
	}
}

// TestFailedTurn: a turn that fails yields its failed event, then a *TurnError with the code
// the server named, which Code and status.FromError read.
func TestFailedTurn(t *testing.T) {
	h := startKeyed(t)
	ctx := context.Background()
	c := dial(t, h.App.Addr(), client.WithAPIKey(aliceKey))
	s, err := c.CreateSession(ctx, "fail")
	if err != nil {
		t.Fatal(err)
	}
	var failed *orchestratorv1.TurnFailed
	var turnErr error
	for ev, err := range c.Turn(ctx, s.GetId(), "fail") {
		if err != nil {
			turnErr = err
			break
		}
		if f := ev.GetFailed(); f != nil {
			failed = f
		}
	}
	if failed == nil {
		t.Fatalf("no failed event; the turn ended with %v", turnErr)
	}
	var te *client.TurnError
	if !errors.As(turnErr, &te) {
		t.Fatalf("the turn ended with %v (%T), want a *client.TurnError", turnErr, turnErr)
	}
	want := &client.TurnError{TurnID: failed.GetTurnId(), Code: client.Code(te), Message: failed.GetMessage()}
	if diff := cmp.Diff(want, te); diff != "" {
		t.Errorf("TurnError (-want +got):\n%s", diff)
	}
	// The model refused the request (HTTP 400): the server names FAILED_PRECONDITION.
	if te.Code != codes.FailedPrecondition || failed.GetCode() != "FAILED_PRECONDITION" {
		t.Errorf("TurnError code %s, failed event's code %q; want FAILED_PRECONDITION in both", te.Code, failed.GetCode())
	}
	if st, ok := status.FromError(turnErr); !ok || st.Code() != te.Code {
		t.Errorf("status.FromError(%v) = %v, %v; want code %s", turnErr, st, ok, te.Code)
	}
}

func TestSessionsAndMemories(t *testing.T) {
	h := startKeyed(t)
	ctx := context.Background()
	c := dial(t, h.App.Addr(), client.WithAPIKey(aliceKey))

	one, err := c.CreateSession(ctx, "one")
	if err != nil {
		t.Fatal(err)
	}
	two, err := c.CreateSession(ctx, "two")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for s, err := range c.ListSessions(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.GetId())
	}
	if !slices.Contains(ids, one.GetId()) || !slices.Contains(ids, two.GetId()) {
		t.Errorf("ListSessions = %v, want %s and %s among them", ids, one.GetId(), two.GetId())
	}
	if got, err := c.GetSession(ctx, one.GetId()); err != nil || got.GetTitle() != "one" {
		t.Errorf("GetSession = %v, %v; want the session titled one", got, err)
	}
	if _, err := c.GetSession(ctx, "no-such-session"); client.Code(err) != codes.NotFound {
		t.Errorf("GetSession of an unknown id: %v, want NOT_FOUND", err)
	}

	stored, err := c.AppendMessages(ctx, one.GetId(),
		&sessionv1.NewMessage{Role: sessionv1.Role_ROLE_USER, Content: "my kiwi plant flowered", ClientId: "m1"},
		&sessionv1.NewMessage{Role: sessionv1.Role_ROLE_ASSISTANT, Content: "Congratulations!", ClientId: "m2"})
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 2 || stored[0].GetSeq() >= stored[1].GetSeq() {
		t.Fatalf("AppendMessages stored %v", stored)
	}
	var contents []string
	for m, err := range c.Messages(ctx, one.GetId(), stored[0].GetSeq()) {
		if err != nil {
			t.Fatal(err)
		}
		contents = append(contents, m.GetContent())
	}
	if diff := cmp.Diff([]string{"Congratulations!"}, contents); diff != "" {
		t.Errorf("Messages after the first (-want +got):\n%s", diff)
	}
	hits, err := c.SearchMessages(ctx, "kiwi", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) == 0 || hits[0].GetSessionId() != one.GetId() || hits[0].GetMessage().GetContent() != "my kiwi plant flowered" {
		t.Errorf("SearchMessages(kiwi) = %v, want the message of session one", hits)
	}
	cx, err := c.Context(ctx, one.GetId())
	if err != nil {
		t.Fatal(err)
	}
	if len(cx.GetWindow()) != 2 || cx.GetTokens().GetTotal() == 0 {
		t.Errorf("Context: window %v, tokens %v; want both messages, counted", cx.GetWindow(), cx.GetTokens())
	}

	rem, err := c.Remember(ctx, memoryv1.MemoryType_MEMORY_TYPE_FACT, "Alice's cat is called Turing")
	if err != nil {
		t.Fatal(err)
	}
	id := rem.GetMemory().GetId()
	recalled, err := c.Recall(ctx, "what is the cat called", 5)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(recalled, func(r *memoryv1.RecalledMemory) bool { return r.GetMemory().GetId() == id }) {
		t.Errorf("Recall did not find memory %s: %v", id, recalled)
	}
	listed := func() []string {
		var out []string
		for m, err := range c.Memories(ctx) {
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, m.GetId())
		}
		return out
	}
	if diff := cmp.Diff([]string{id}, listed()); diff != "" {
		t.Errorf("Memories (-want +got):\n%s", diff)
	}
	if err := c.Forget(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got := listed(); len(got) != 0 {
		t.Errorf("Memories after Forget = %v, want none", got)
	}
}

func TestDialRefusals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	missing := filepath.Join(t.TempDir(), "missing.pem")
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		addr string
		opts []client.Option
		want string
	}{
		{"plaintext and TLS", "127.0.0.1:1", []client.Option{client.WithInsecure(), client.WithCAFile(notPEM)}, "contradict"},
		{"missing CA file", "127.0.0.1:1", []client.Option{client.WithCAFile(missing)}, "reading the CA file"},
		{"CA file without certificates", "127.0.0.1:1", []client.Option{client.WithCAFile(notPEM)}, "no PEM certificate"},
		{"missing client certificate", "127.0.0.1:1", []client.Option{client.WithClientCertificate(missing, missing)}, "client certificate"},
		{"nobody listening", testenv.ClosedAddr(t), nil, "connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := client.Dial(ctx, tt.addr, tt.opts...)
			if err == nil {
				_ = c.Close()
				t.Fatalf("Dial succeeded, want an error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Dial: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestTLS: a Hermes serving TLS is reached with its CA file, and with a client certificate
// where it verifies them; Dial's plaintext default for loopback does not get through.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := devcerts.NewCA("hermes test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.WriteSet(dir, map[string][]string{"server": {"127.0.0.1", "localhost"}, "client": {"client.test"}}, time.Hour); err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.crt")
	h, err := startHermes(testModel, func(c *app.Config) {
		c.TLSCert, c.TLSKey = filepath.Join(dir, "server", "tls.crt"), filepath.Join(dir, "server", "tls.key")
		c.TLSClientCA, c.TLSClientAuth = caFile, "optional"
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for name, opts := range map[string][]client.Option{
		"CA file":            {client.WithCAFile(caFile), client.WithUser("ada")},
		"client certificate": {client.WithCAFile(caFile), client.WithClientCertificate(filepath.Join(dir, "client", "tls.crt"), filepath.Join(dir, "client", "tls.key")), client.WithUser("ada")},
	} {
		t.Run(name, func(t *testing.T) {
			c := dial(t, h.App.Addr(), opts...)
			s, err := c.CreateSession(ctx, "over TLS")
			if err != nil {
				t.Fatal(err)
			}
			if err := firstErr(c.Turn(ctx, s.GetId(), "What is 2 + 2?")); err != nil {
				t.Fatal(err)
			}
		})
	}
	if c, err := client.Dial(ctx, h.App.Addr()); err == nil {
		_ = c.Close()
		t.Error("Dial in plaintext reached a TLS server")
	} else {
		t.Logf("plaintext to a TLS server: %v", err)
	}
	switch c, err := client.Dial(ctx, h.App.Addr(), client.WithServerName("localhost")); {
	case err == nil:
		_ = c.Close()
		t.Error("Dial with the system's roots accepted a certificate of a private CA")
	case client.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "certificate"):
		t.Errorf("Dial with the system's roots: %v; want UNAVAILABLE saying why the certificate was refused", err)
	}
}
