package security

// Issue 24 item 3: per-user quotas. Each limit is refused with RESOURCE_EXHAUSTED and
// google.rpc.RetryInfo over gRPC and 429 with Retry-After over HTTP; a refused request stores
// nothing; a key's own quota in the auth file wins over the default; operators are not limited;
// and two replicas on one Redis share the counters.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/app"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	"github.com/hermes-agent/hermes/internal/quota"
	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/testenv"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	"github.com/hermes-agent/hermes/test/hermestest"
)

// quotaKey is the key of a user named for the limit its test uses up.
func quotaKey(user string) string { return "sk-quota-" + user + "-0123456789abcdef" }

var quotaUsers = []string{"sess", "bytes", "rate", "turns", "conc", "tokens", "ops-for"}

// quotaAuthFile gives each user its key; "vip" has its own, larger session quota, "tokens" a
// quota of one token a day and "conc" no limit of turns a minute.
func quotaAuthFile() string {
	var b strings.Builder
	for _, u := range quotaUsers {
		switch u {
		case "tokens":
			fmt.Fprintf(&b, "%s: {role: user, user: tokens, quota: {tokens_per_day: 1}}\n", quotaKey(u))
			continue
		case "conc":
			// 0 is no limit: this user's turns are limited by how many run at once only.
			fmt.Fprintf(&b, "%s: {role: user, user: conc, quota: {turns_per_minute: 0}}\n", quotaKey(u))
			continue
		}
		fmt.Fprintf(&b, "%s: %s\n", quotaKey(u), u)
	}
	fmt.Fprintf(&b, "%s: {role: user, user: vip, quota: {sessions: 4}}\n", quotaKey("vip"))
	fmt.Fprintf(&b, "%s: {role: operator, name: ops}\n", opsKey)
	return b.String()
}

var testQuota = quota.Config{Limits: quota.Limits{
	Sessions: 2, StoredBytes: 1000, AppendsPerMinute: 3, ConcurrentTurns: 1, TurnsPerMinute: 2, TokensPerDay: 1_000_000,
}}

// wantExhausted checks a gRPC refusal: RESOURCE_EXHAUSTED with a positive RetryInfo.
func wantExhausted(t *testing.T, what string, err error) {
	t.Helper()
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("%s: %v, want RESOURCE_EXHAUSTED", what, err)
	}
	if d := rpc.RetryDelay(err); d <= 0 {
		t.Errorf("%s: no RetryInfo in %v", what, status.Convert(err).Proto())
	}
}

// runTurn runs a turn to its end and returns the RPC's error.
func runTurn(ctx context.Context, c orchestratorv1.OrchestratorServiceClient, req *orchestratorv1.RunTurnRequest) error {
	st, err := c.RunTurn(ctx, req)
	if err != nil {
		return err
	}
	for {
		if _, err := st.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// httpCall sends a JSON request with key and returns the status and Retry-After.
func httpCall(t *testing.T, method, url, key, body string) (int, string) {
	code, retryAfter, _ := httpCallBody(t, method, url, key, body)
	return code, retryAfter
}

// httpCallBody is httpCall with the response's body (the first 4 KiB), for failure messages.
func httpCallBody(t *testing.T, method, url, key, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(b)
}

func wantTooMany(t *testing.T, what string, code int, retryAfter string) {
	t.Helper()
	if code != http.StatusTooManyRequests || retryAfter == "" || retryAfter == "0" {
		t.Errorf("%s over HTTP: %d, Retry-After %q; want 429 with Retry-After", what, code, retryAfter)
	}
}

func TestQuotas(t *testing.T) {
	gate := make(chan struct{})
	var gateOnce sync.Once
	openGate := func() { gateOnce.Do(func() { close(gate) }) }
	t.Cleanup(openGate)
	m, err := scripted.New(func(r scripted.Request) scripted.Reply {
		if strings.Contains(r.LastUser(), "block") {
			select {
			case <-gate:
			case <-time.After(time.Minute):
			}
		}
		return scripted.Text("done")
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	dir := t.TempDir()
	cfg := hermestest.Config(t)
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.DataDir = dir
	cfg.ModelBaseURL = m.URL()
	cfg.AuthFile = writeFile(t, filepath.Join(dir, "keys.yaml"), quotaAuthFile())
	cfg.Quota = testQuota
	a := hermestest.StartApp(t, cfg, quietLog())
	conn, err := rpc.Dial(a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	sessions := sessionv1.NewSessionServiceClient(conn)
	orch := orchestratorv1.NewOrchestratorServiceClient(conn)
	base := "http://" + a.HTTPAddr()
	newSession := func(t *testing.T, user string) string {
		t.Helper()
		s, err := sessions.CreateSession(as(quotaKey(user)), &sessionv1.CreateSessionRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return s.GetSession().GetId()
	}
	text := func(s string) []*sessionv1.NewMessage {
		return []*sessionv1.NewMessage{{Role: sessionv1.Role_ROLE_USER, Content: s}}
	}
	countMessages := func(t *testing.T, user, id string) int {
		t.Helper()
		l, err := sessions.ListMessages(as(quotaKey(user)), &sessionv1.ListMessagesRequest{SessionId: id})
		if err != nil {
			t.Fatal(err)
		}
		return len(l.GetMessages())
	}

	t.Run("sessions", func(t *testing.T) {
		first := newSession(t, "sess")
		newSession(t, "sess")
		_, err := sessions.CreateSession(as(quotaKey("sess")), &sessionv1.CreateSessionRequest{})
		wantExhausted(t, "third session of 2", err)
		code, ra := httpCall(t, "POST", base+"/v1/sessions", quotaKey("sess"), `{}`)
		wantTooMany(t, "third session", code, ra)
		// An operator creates sessions for the user beyond the limit.
		if _, err := sessions.CreateSession(as(opsKey), &sessionv1.CreateSessionRequest{UserId: "ops-for"}); err != nil {
			t.Fatal(err)
		}
		// Deleting gives the session back.
		if _, err := sessions.DeleteSession(as(quotaKey("sess")), &sessionv1.DeleteSessionRequest{SessionId: first}); err != nil {
			t.Fatal(err)
		}
		newSession(t, "sess")
		// The key's own quota (4) wins over the default (2).
		for range 4 {
			newSession(t, "vip")
		}
		_, err = sessions.CreateSession(as(quotaKey("vip")), &sessionv1.CreateSessionRequest{})
		wantExhausted(t, "fifth session of vip's 4", err)
	})

	t.Run("appends a minute", func(t *testing.T) {
		id := newSession(t, "rate")
		for i := range 3 {
			if _, err := sessions.AppendMessages(as(quotaKey("rate")), &sessionv1.AppendMessagesRequest{SessionId: id, Messages: text(fmt.Sprint("m", i))}); err != nil {
				t.Fatal(err)
			}
		}
		_, err := sessions.AppendMessages(as(quotaKey("rate")), &sessionv1.AppendMessagesRequest{SessionId: id, Messages: text("m3")})
		wantExhausted(t, "fourth append of 3 a minute", err)
		code, ra := httpCall(t, "POST", base+"/v1/sessions/"+id+"/messages", quotaKey("rate"), `{"messages":[{"role":"ROLE_USER","content":"m4"}]}`)
		wantTooMany(t, "fourth append", code, ra)
		if n := countMessages(t, "rate", id); n != 3 {
			t.Errorf("%d messages stored, want the 3 accepted", n)
		}
		// An operator appends for the user at once.
		if _, err := sessions.AppendMessages(as(opsKey), &sessionv1.AppendMessagesRequest{SessionId: id, UserId: "rate", Messages: text("ops")}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("stored bytes", func(t *testing.T) {
		id := newSession(t, "bytes")
		if _, err := sessions.AppendMessages(as(quotaKey("bytes")), &sessionv1.AppendMessagesRequest{SessionId: id, Messages: text(strings.Repeat("a", 600))}); err != nil {
			t.Fatal(err)
		}
		_, err := sessions.AppendMessages(as(quotaKey("bytes")), &sessionv1.AppendMessagesRequest{SessionId: id, Messages: text(strings.Repeat("b", 600))})
		wantExhausted(t, "1200 bytes of 1000", err)
		if n := countMessages(t, "bytes", id); n != 1 {
			t.Errorf("%d messages stored, want 1 (the refused append stores nothing)", n)
		}
		// Deleting the session gives its bytes back.
		if _, err := sessions.DeleteSession(as(quotaKey("bytes")), &sessionv1.DeleteSessionRequest{SessionId: id}); err != nil {
			t.Fatal(err)
		}
		id = newSession(t, "bytes")
		if _, err := sessions.AppendMessages(as(quotaKey("bytes")), &sessionv1.AppendMessagesRequest{SessionId: id, Messages: text(strings.Repeat("c", 600))}); err != nil {
			t.Fatalf("after deleting the full session: %v", err)
		}
	})

	t.Run("turns a minute", func(t *testing.T) {
		id := newSession(t, "turns")
		for i := range 2 {
			if err := runTurn(as(quotaKey("turns")), orch, &orchestratorv1.RunTurnRequest{SessionId: id, Text: "hi"}); err != nil {
				t.Fatalf("turn %d: %v", i, err)
			}
		}
		err := runTurn(as(quotaKey("turns")), orch, &orchestratorv1.RunTurnRequest{SessionId: id, Text: "hi"})
		wantExhausted(t, "third turn of 2 a minute", err)
		code, ra, body := httpCallBody(t, "POST", base+"/v1/sessions/"+id+"/turns", quotaKey("turns"), `{"text":"hi"}`)
		wantTooMany(t, "third turn", code, ra)
		if code != http.StatusTooManyRequests {
			t.Logf("the response: %s", body)
		}
		// An operator runs the user's turns beyond the limit.
		for range 3 {
			if err := runTurn(as(opsKey), orch, &orchestratorv1.RunTurnRequest{SessionId: id, UserId: "turns", Text: "hi"}); err != nil {
				t.Fatalf("operator's turn: %v", err)
			}
		}
	})

	t.Run("turns at once", func(t *testing.T) {
		a, b := newSession(t, "conc"), newSession(t, "conc")
		started := make(chan error, 1)
		go func() {
			started <- runTurn(as(quotaKey("conc")), orch, &orchestratorv1.RunTurnRequest{SessionId: a, Text: "block"})
		}()
		testenv.WaitFor(t, 30*time.Second, "the first turn to reach the model", func() bool {
			for _, r := range m.Requests() {
				if strings.Contains(r.LastUser(), "block") {
					return true
				}
			}
			return false
		})
		err := runTurn(as(quotaKey("conc")), orch, &orchestratorv1.RunTurnRequest{SessionId: b, Text: "second"})
		wantExhausted(t, "second turn at once of 1", err)
		if n := countMessages(t, "conc", b); n != 0 {
			t.Errorf("the refused turn stored %d messages", n)
		}
		openGate()
		if err := <-started; err != nil {
			t.Fatal(err)
		}
		if err := runTurn(as(quotaKey("conc")), orch, &orchestratorv1.RunTurnRequest{SessionId: b, Text: "after"}); err != nil {
			t.Fatalf("a turn after the first ended: %v", err)
		}
	})

	t.Run("tokens a day", func(t *testing.T) {
		id := newSession(t, "tokens")
		if err := runTurn(as(quotaKey("tokens")), orch, &orchestratorv1.RunTurnRequest{SessionId: id, Text: "hi"}); err != nil {
			t.Fatal(err)
		}
		err := runTurn(as(quotaKey("tokens")), orch, &orchestratorv1.RunTurnRequest{SessionId: id, Text: "hi"})
		wantExhausted(t, "a turn after the day's token", err)
		if msg := status.Convert(err).Message(); !strings.Contains(msg, "tokens of the day") {
			t.Errorf("refused for %q, want the day's tokens", msg)
		}
		if d := rpc.RetryDelay(err); d > 24*time.Hour {
			t.Errorf("retry in %v, want before the next UTC midnight", d)
		}
	})
}

// TestQuotasSharedByReplicas: two session replicas on one Redis count one user's sessions
// together.
func TestQuotasSharedByReplicas(t *testing.T) {
	_, prefix := testenv.Redis(t)
	dir := t.TempDir()
	keys := writeFile(t, filepath.Join(dir, "keys.yaml"), quotaAuthFile())
	var clients []sessionv1.SessionServiceClient
	for i := range 2 {
		cfg := hermestest.Config(t)
		cfg.Target = app.TargetSession
		cfg.DataDir = filepath.Join(dir, fmt.Sprint(i))
		cfg.RedisURL, cfg.RedisPrefix = testenv.RedisURL(), prefix
		cfg.AuthFile = keys
		cfg.Quota = testQuota
		a := hermestest.StartApp(t, cfg, quietLog())
		conn, err := rpc.Dial(a.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		clients = append(clients, sessionv1.NewSessionServiceClient(conn))
	}
	if _, err := clients[0].CreateSession(as(quotaKey("sess")), &sessionv1.CreateSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := clients[1].CreateSession(as(quotaKey("sess")), &sessionv1.CreateSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	for i, c := range clients {
		_, err := c.CreateSession(as(quotaKey("sess")), &sessionv1.CreateSessionRequest{})
		wantExhausted(t, fmt.Sprintf("a third session at replica %d", i), err)
	}
	// The appends a minute are shared too.
	s, err := clients[0].CreateSession(as(quotaKey("rate")), &sessionv1.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		msg := []*sessionv1.NewMessage{{Role: sessionv1.Role_ROLE_USER, Content: "x"}}
		if _, err := clients[i%2].AppendMessages(as(quotaKey("rate")), &sessionv1.AppendMessagesRequest{SessionId: s.GetSession().GetId(), Messages: msg}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = clients[1].AppendMessages(as(quotaKey("rate")), &sessionv1.AppendMessagesRequest{SessionId: s.GetSession().GetId(), Messages: []*sessionv1.NewMessage{{Role: sessionv1.Role_ROLE_USER, Content: "x"}}})
	wantExhausted(t, "a fourth append across replicas", err)
}

// TestBodyOverLimitRefusedUnread: a declared body over the HTTP limit is refused with 413
// before it is read: the server answers while the client has sent only the headers.
func TestBodyOverLimitRefusedUnread(t *testing.T) {
	dir := t.TempDir()
	cfg := hermestest.Config(t)
	cfg.HTTP.Listen, cfg.DataDir = "127.0.0.1:0", dir
	cfg.AuthFile = writeFile(t, filepath.Join(dir, "keys.yaml"), quotaAuthFile())
	a := hermestest.StartApp(t, cfg, quietLog())
	// The body never comes: a pipe nobody writes to, with 15 MB declared.
	pr, pw := io.Pipe()
	t.Cleanup(func() { _ = pw.Close() })
	req, err := http.NewRequest("POST", "http://"+a.HTTPAddr()+"/v1/sessions/x/messages", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = 15 << 20
	req.Header.Set("Authorization", "Bearer "+quotaKey("bytes"))
	req.Header.Set("Content-Type", "application/json")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		body, _ := io.ReadAll(resp.Body)
		t.Errorf("15 MB declared: %d %s, want 413", resp.StatusCode, bytes.TrimSpace(body))
	}
}
