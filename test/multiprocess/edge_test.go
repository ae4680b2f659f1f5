package multiprocess

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/devcerts"
	"github.com/hermes-agent/hermes/internal/events"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	"github.com/hermes-agent/hermes/internal/qdranttest"
	"github.com/hermes-agent/hermes/internal/testenv"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	"github.com/hermes-agent/hermes/test/multiprocess/cluster"
)

// The keys of the edge test: two users and an operator. The auth file holds their digests, as
// deploy/k8s's Secret does.
const (
	edgeAliceKey = "sk-edge-alice-0123456789abcdef"
	edgeBobKey   = "sk-edge-bob-0123456789abcdefgh"
	edgeOpsKey   = "sk-edge-ops-0123456789abcdefgh"
)

// edgeLayout is Hermes as deploy/k8s runs it: five processes, each serving TLS with its own
// certificate of one CA, the internal four requiring a client certificate of that CA
// (HERMES_TLS_CLIENT_AUTH=require) and the orchestrator — the edge — accepting callers without
// one (optional) who bring API keys; every process reads the same auth file.
type edgeLayout struct {
	dir      string
	c        *cluster.Cluster
	procs    map[string]*cluster.Process
	httpAddr string
	// conn reaches the edge as a user does: TLS verified against the CA, no client certificate.
	conn *grpc.ClientConn
	http *http.Client
}

func startEdgeLayout(t *testing.T) *edgeLayout {
	t.Helper()
	ctx := context.Background()
	l := &edgeLayout{dir: t.TempDir(), procs: map[string]*cluster.Process{}}
	ca, err := devcerts.NewCA("hermes edge test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	hosts := map[string][]string{}
	for _, target := range cluster.Targets {
		hosts[target] = []string{"localhost", "127.0.0.1"}
	}
	hosts["prober"] = []string{"localhost"}
	if err := ca.WriteSet(filepath.Join(l.dir, "tls"), hosts, time.Hour); err != nil {
		t.Fatal(err)
	}
	var auth strings.Builder
	for key, who := range map[string]string{edgeAliceKey: "alice", edgeBobKey: "bob", edgeOpsKey: "{role: operator, name: ops}"} {
		d := sha256.Sum256([]byte(key))
		fmt.Fprintf(&auth, "\"sha256:%s\": %s\n", hex.EncodeToString(d[:]), who)
	}
	authFile := filepath.Join(l.dir, "auth.yaml")
	if err := os.WriteFile(authFile, []byte(auth.String()), 0o600); err != nil {
		t.Fatal(err)
	}

	_, prefix := testenv.Redis(t)
	ns := "mpedge" + randomID()
	nc, js, err := events.Connect(sharedNATS, "hermes-edge-test", nil)
	if err != nil {
		t.Fatalf("NATS at %s is not reachable (start it with scripts/ensure-backends.sh): %v", sharedNATS, err)
	}
	t.Cleanup(func() {
		_ = js.DeleteStream(context.Background(), events.NamespacedNames(ns).Stream)
		nc.Close()
	})
	model, err := scripted.New(cluster.Model(cluster.ModelOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(model.Close)

	addrs := map[string]string{}
	for _, target := range cluster.Targets {
		if addrs[target], err = cluster.FreeAddr(); err != nil {
			t.Fatal(err)
		}
	}
	if l.httpAddr, err = cluster.FreeAddr(); err != nil {
		t.Fatal(err)
	}
	shared := []string{
		"HERMES_REDIS_URL=" + testenv.RedisURL(),
		"HERMES_REDIS_PREFIX=" + prefix,
		"HERMES_NATS_URL=" + sharedNATS,
		"HERMES_NATS_NAMESPACE=" + ns,
		"HERMES_QDRANT_ADDR=" + qdranttest.Addr(t),
		"HERMES_MEMORY_QDRANT_COLLECTION=hermes_" + ns,
		"HERMES_MODEL_BASE_URL=" + model.URL(),
		"HERMES_MODEL=scripted-edge",
		"HERMES_MODEL_API_KEY=unused-by-the-scripted-model",
		"HERMES_AUTH_FILE=" + authFile,
		"HERMES_SHUTDOWN_TIMEOUT=5s",
		// The key that signs turn.finished, shared by the orchestrator and memory.
		"HERMES_EVENTS_KEY=edge-journey-events-key-" + ns + "-0123456789abcdef",
	}
	for _, target := range cluster.Targets {
		shared = append(shared, "HERMES_"+strings.ToUpper(target)+"_ADDR="+addrs[target])
	}
	prober := l.clientTLS(t, "prober")
	var procs []*cluster.Process
	for _, target := range cluster.Targets {
		tlsDir := filepath.Join(l.dir, "tls", target)
		env := append([]string{
			"HERMES_DATA_DIR=" + filepath.Join(l.dir, "data", target),
			// deploy/k8s/base/<target>/deployment.yaml.
			"HERMES_TLS_CERT=" + filepath.Join(tlsDir, "tls.crt"),
			"HERMES_TLS_KEY=" + filepath.Join(tlsDir, "tls.key"),
			"HERMES_TLS_CA=" + filepath.Join(tlsDir, "ca.crt"),
			"HERMES_TLS_CLIENT_CA=" + filepath.Join(tlsDir, "ca.crt"),
		}, shared...)
		if target == "orchestrator" {
			env = append(env, "HERMES_TLS_CLIENT_AUTH=optional", "HERMES_HTTP_LISTEN="+l.httpAddr)
		} else {
			env = append(env, "HERMES_TLS_CLIENT_AUTH=require")
		}
		metrics, err := cluster.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		p := cluster.NewProcess(hermesBin, target, target, addrs[target], metrics, filepath.Join(l.dir, target+".log"), env)
		p.HealthCreds = credentials.NewTLS(prober)
		l.procs[target] = p
		procs = append(procs, p)
	}
	l.c = &cluster.Cluster{Procs: procs}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("process logs:%s", l.c.Logs(8000))
		}
		l.c.Close()
	})
	for _, p := range l.c.Procs {
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.c.WaitServing(ctx, 60*time.Second); err != nil {
		t.Fatalf("the five processes did not serve: %v", err)
	}

	userTLS := l.clientTLS(t, "")
	if l.conn, err = grpc.NewClient(addrs["orchestrator"], grpc.WithTransportCredentials(credentials.NewTLS(userTLS))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.conn.Close() })
	l.http = &http.Client{Transport: &http.Transport{TLSClientConfig: userTLS}, Timeout: 60 * time.Second}
	t.Cleanup(l.http.CloseIdleConnections)
	return l
}

// clientTLS verifies the servers against the test's CA and, when cert names one, presents that
// certificate.
func (l *edgeLayout) clientTLS(t *testing.T, cert string) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(filepath.Join(l.dir, "tls", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cfg := &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}
	if cert != "" {
		kp, err := tls.LoadX509KeyPair(filepath.Join(l.dir, "tls", cert, "tls.crt"), filepath.Join(l.dir, "tls", cert, "tls.key"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{kp}
	}
	return cfg
}

// do sends an HTTP request to the edge's HTTP API with key and returns the status and body.
func (l *edgeLayout) do(t *testing.T, method, path, key, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "https://"+l.httpAddr+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := l.http.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

func asKey(ctx context.Context, key string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
}

// TestEdgeJourney: in the Kubernetes layout a user reaches everything that is theirs at the
// orchestrator's address only — create a session, run a turn, read its messages, list, recall
// and forget the memory the turn left — over gRPC, over the HTTP API and with hermes chat; and
// the edge refuses another user's session, operator-only methods with a user key, and the
// internal services stay closed to users.
func TestEdgeJourney(t *testing.T) {
	l := startEdgeLayout(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	alice := asKey(ctx, edgeAliceKey)
	sessions := sessionv1.NewSessionServiceClient(l.conn)
	memories := memoryv1.NewMemoryServiceClient(l.conn)
	turns := orchestratorv1.NewOrchestratorServiceClient(l.conn)

	// gRPC: the whole journey at the edge.
	created, err := sessions.CreateSession(alice, &sessionv1.CreateSessionRequest{Title: "edge"})
	if err != nil {
		t.Fatalf("CreateSession at the edge: %v", err)
	}
	sid := created.GetSession().GetId()
	if u := created.GetSession().GetUserId(); u != "alice" {
		t.Errorf("the session belongs to %q, want alice (the key's user)", u)
	}
	runEdgeTurn(t, turns, alice, sid, cluster.LoadTurn("12*7", "M-4711"))
	msgs, err := sessions.ListMessages(alice, &sessionv1.ListMessagesRequest{SessionId: sid})
	if err != nil {
		t.Fatalf("ListMessages at the edge: %v", err)
	}
	var kinds []string
	for _, m := range msgs.GetMessages() {
		kinds = append(kinds, m.GetRole().String()+"/"+m.GetKind().String())
	}
	if n := len(msgs.GetMessages()); n < 4 || !strings.Contains(msgs.GetMessages()[n-1].GetContent(), "84") {
		t.Errorf("messages after the turn: %v, want the user message, the calculator's call and result, and the answer 84", kinds)
	}
	if _, err := sessions.ListSessions(alice, &sessionv1.ListSessionsRequest{}); err != nil {
		t.Errorf("ListSessions at the edge: %v", err)
	}
	if _, err := sessions.BuildContext(alice, &sessionv1.BuildContextRequest{SessionId: sid}); err != nil {
		t.Errorf("BuildContext at the edge: %v", err)
	}
	if list, err := turns.ListTurns(alice, &orchestratorv1.ListTurnsRequest{SessionId: sid}); err != nil || len(list.GetTurns()) != 1 {
		t.Errorf("ListTurns at the edge: %v, %d turns, want 1", err, len(list.GetTurns()))
	}
	mem := waitMemory(t, func() []*memoryv1.Memory {
		resp, err := memories.ListMemories(alice, &memoryv1.ListMemoriesRequest{})
		if err != nil {
			t.Fatalf("ListMemories at the edge: %v", err)
		}
		return resp.GetMemories()
	}, cluster.MemberContent("M-4711"))
	rec, err := memories.Recall(alice, &memoryv1.RecallRequest{Query: cluster.MemberContent("M-4711")})
	if err != nil || !recalled(rec.GetMemories(), mem.GetId()) {
		t.Errorf("Recall at the edge: %v, %d memories, want %s among them", err, len(rec.GetMemories()), mem.GetId())
	}

	// Refusals at the edge.
	bob := asKey(ctx, edgeBobKey)
	for _, tc := range []struct {
		name string
		call func() error
		code codes.Code
	}{
		{"bob reads alice's session", func() error {
			_, err := sessions.GetSession(bob, &sessionv1.GetSessionRequest{SessionId: sid})
			return err
		}, codes.PermissionDenied},
		{"bob lists alice's messages naming her", func() error {
			_, err := sessions.ListMessages(bob, &sessionv1.ListMessagesRequest{SessionId: sid, UserId: "alice"})
			return err
		}, codes.PermissionDenied},
		{"bob runs a turn in alice's session", func() error {
			s, err := turns.RunTurn(bob, &orchestratorv1.RunTurnRequest{SessionId: sid, Text: "hi"})
			if err == nil {
				_, err = s.Recv()
			}
			return err
		}, codes.PermissionDenied},
		{"bob forgets alice's memory", func() error {
			_, err := memories.Forget(bob, &memoryv1.ForgetRequest{MemoryId: mem.GetId(), UserId: "alice"})
			return err
		}, codes.PermissionDenied},
		{"a user key runs maintenance", func() error {
			_, err := memories.RunMaintenance(alice, &memoryv1.RunMaintenanceRequest{UserId: "alice"})
			return err
		}, codes.PermissionDenied},
		{"a user key rewrites a summary", func() error {
			_, err := sessions.UpdateSummary(alice, &sessionv1.UpdateSummaryRequest{SessionId: sid, UserId: "alice"})
			return err
		}, codes.PermissionDenied},
		{"an operator's maintenance is not forwarded", func() error {
			_, err := memories.RunMaintenance(asKey(ctx, edgeOpsKey), &memoryv1.RunMaintenanceRequest{})
			return err
		}, codes.Unimplemented},
	} {
		if err := tc.call(); status.Code(err) != tc.code {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
		}
	}
	// The session service itself admits Hermes' services only: a user's key gets no call
	// through, with TLS and no client certificate or in plaintext.
	for name, creds := range map[string]credentials.TransportCredentials{
		"TLS without a client certificate": credentials.NewTLS(l.clientTLS(t, "")),
		"plaintext":                        insecure.NewCredentials(),
	} {
		direct, err := grpc.NewClient(l.procs["session"].Addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		_, err = sessionv1.NewSessionServiceClient(direct).GetSession(alice, &sessionv1.GetSessionRequest{SessionId: sid})
		_ = direct.Close()
		if status.Code(err) != codes.Unavailable {
			t.Errorf("the session service directly with a user key (%s): %v, want the connection refused", name, err)
		}
	}
	if _, err := memories.Forget(alice, &memoryv1.ForgetRequest{MemoryId: mem.GetId()}); err != nil {
		t.Fatalf("Forget at the edge: %v", err)
	}
	if left, err := memories.ListMemories(alice, &memoryv1.ListMemoriesRequest{}); err != nil || hasMemory(left.GetMemories(), mem.GetId()) {
		t.Errorf("after Forget: %v, memory %s still listed: %v", err, mem.GetId(), left.GetMemories())
	}

	t.Run("http", func(t *testing.T) { edgeHTTPJourney(t, l) })
	t.Run("chat", func(t *testing.T) { edgeChat(t, l) })
}

func edgeHTTPJourney(t *testing.T, l *edgeLayout) {
	// The document lists what the edge serves, and nothing else.
	code, doc := l.do(t, "GET", "/openapi.json", "", "")
	if code != http.StatusOK {
		t.Fatalf("GET /openapi.json: %d", code)
	}
	for _, want := range []string{`"/v1/sessions"`, `"/v1/sessions/{session_id}/turns"`, `"/v1/memories:recall"`, `"/v1/memories/{memory_id}"`} {
		if !bytes.Contains(doc, []byte(want)) {
			t.Errorf("openapi.json lacks %s", want)
		}
	}
	for _, not := range []string{`"/v1/memories:maintain"`, `"/v1/sessions/{session_id}/summary"`, `"/v1/tools"`, `"/v1/mcp/servers"`} {
		if bytes.Contains(doc, []byte(not)) {
			t.Errorf("openapi.json lists %s, which the edge does not serve", not)
		}
	}

	code, raw := l.do(t, "POST", "/v1/sessions", edgeAliceKey, `{"title":"over http"}`)
	if code != http.StatusOK {
		t.Fatalf("POST /v1/sessions: %d %s", code, raw)
	}
	var created struct {
		Session struct {
			ID     string `json:"id"`
			UserID string `json:"user_id"`
		} `json:"session"`
	}
	if err := json.Unmarshal(raw, &created); err != nil || created.Session.ID == "" || created.Session.UserID != "alice" {
		t.Fatalf("POST /v1/sessions: %s (%v), want alice's new session", raw, err)
	}
	sid := created.Session.ID
	code, raw = l.do(t, "POST", "/v1/sessions/"+sid+"/turns", edgeAliceKey, `{"text":"`+cluster.LoadTurn("6*7", "M-0815")+`"}`)
	if code != http.StatusOK || !bytes.Contains(raw, []byte(`"completed"`)) {
		t.Fatalf("POST /v1/sessions/%s/turns: %d, want a completed turn's events:\n%s", sid, code, raw)
	}
	code, raw = l.do(t, "GET", "/v1/sessions/"+sid+"/messages", edgeAliceKey, "")
	if code != http.StatusOK || !bytes.Contains(raw, []byte("42")) {
		t.Errorf("GET messages: %d %s, want the answer 42", code, raw)
	}
	type memoryList struct {
		Memories []struct {
			ID      string `json:"id"`
			Content string `json:"content"`
		} `json:"memories"`
	}
	var id string
	testenv.WaitFor(t, 60*time.Second, "the HTTP turn's memory", func() bool {
		code, raw := l.do(t, "GET", "/v1/memories", edgeAliceKey, "")
		var list memoryList
		if code != http.StatusOK || json.Unmarshal(raw, &list) != nil {
			t.Fatalf("GET /v1/memories: %d %s", code, raw)
		}
		for _, m := range list.Memories {
			if m.Content == cluster.MemberContent("M-0815") {
				id = m.ID
			}
		}
		return id != ""
	})
	code, raw = l.do(t, "POST", "/v1/memories:recall", edgeAliceKey, `{"query":"`+cluster.MemberContent("M-0815")+`"}`)
	if code != http.StatusOK || !bytes.Contains(raw, []byte(id)) {
		t.Errorf("POST /v1/memories:recall: %d %s, want %s", code, raw, id)
	}

	for _, tc := range []struct {
		name, method, path, key, body string
		status                        int
	}{
		{"bob reads alice's session", "GET", "/v1/sessions/" + sid, edgeBobKey, "", http.StatusForbidden},
		{"bob forgets alice's memory", "DELETE", "/v1/memories/" + id + "?user_id=alice", edgeBobKey, "", http.StatusForbidden},
		{"a user key runs maintenance", "POST", "/v1/memories:maintain", edgeAliceKey, `{}`, http.StatusNotFound},
		{"the tool registry is not at the edge", "GET", "/v1/tools", edgeAliceKey, "", http.StatusNotFound},
		{"no key", "GET", "/v1/sessions", "", "", http.StatusUnauthorized},
	} {
		if code, raw := l.do(t, tc.method, tc.path, tc.key, tc.body); code != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, code, raw, tc.status)
		}
	}

	if code, raw := l.do(t, "DELETE", "/v1/memories/"+id, edgeAliceKey, ""); code != http.StatusOK {
		t.Fatalf("DELETE /v1/memories/%s: %d %s", id, code, raw)
	}
	if _, raw := l.do(t, "GET", "/v1/memories", edgeAliceKey, ""); bytes.Contains(raw, []byte(id)) {
		t.Errorf("memory %s still listed after DELETE: %s", id, raw)
	}
}

// edgeChat: hermes chat against the edge, with the CA and a user key, starts a conversation.
func edgeChat(t *testing.T, l *edgeLayout) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, hermesBin, "chat", "--addr", l.procs["orchestrator"].Addr,
		"--tls-ca", filepath.Join(l.dir, "tls", "ca.crt"), "--tls-server-name", "localhost",
		"--api-key", edgeAliceKey, "--history=false")
	cmd.Stdin = strings.NewReader(cluster.LoadTurn("3*5", "M-1234") + "\n/quit\n")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("hermes chat --addr <edge>: %v\n%s", err, out.String())
	}
	for _, want := range []string{"New session ", "结果是 15"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("chat output lacks %q:\n%s", want, out.String())
		}
	}
}

// runEdgeTurn runs a turn and fails the test unless it completes.
func runEdgeTurn(t *testing.T, turns orchestratorv1.OrchestratorServiceClient, ctx context.Context, sid, text string) {
	t.Helper()
	stream, err := turns.RunTurn(ctx, &orchestratorv1.RunTurnRequest{SessionId: sid, Text: text})
	if err != nil {
		t.Fatalf("RunTurn at the edge: %v", err)
	}
	completed := false
	for {
		ev, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("RunTurn at the edge: %v", err)
		}
		if f := ev.GetEvent().GetFailed(); f != nil {
			t.Fatalf("the turn failed: %v", f)
		}
		completed = completed || ev.GetEvent().GetCompleted() != nil
	}
	if !completed {
		t.Fatal("the turn did not complete")
	}
}

// waitMemory waits until list returns a memory with content (extraction runs after the turn,
// from turn.finished) and returns it.
func waitMemory(t *testing.T, list func() []*memoryv1.Memory, content string) *memoryv1.Memory {
	t.Helper()
	var found *memoryv1.Memory
	testenv.WaitFor(t, 60*time.Second, "the memory "+content, func() bool {
		for _, m := range list() {
			if m.GetContent() == content {
				found = m
			}
		}
		return found != nil
	})
	return found
}

func hasMemory(ms []*memoryv1.Memory, id string) bool {
	for _, m := range ms {
		if m.GetId() == id {
			return true
		}
	}
	return false
}

func recalled(ms []*memoryv1.RecalledMemory, id string) bool {
	for _, m := range ms {
		if m.GetMemory().GetId() == id {
			return true
		}
	}
	return false
}
