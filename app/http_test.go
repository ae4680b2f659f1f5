package app

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/hermes-agent/hermes/internal/model/scripted"
	"github.com/hermes-agent/hermes/internal/testenv"
	hermesproto "github.com/hermes-agent/hermes/proto"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

// The API keys of the test: alice's, bob's and an operator's.
const (
	httpTestKey  = "http-test-key-alice-0123456789"
	httpTestUser = "alice"
	bobKey       = "http-test-key-bob-0123456789"
	operatorKey  = "http-test-key-ops-0123456789"
)

// startHTTP runs every target with the HTTP API on, API keys for the orchestrator and a
// scripted model: "slow" makes it wait (until the client goes away), anything else answers
// "hello from the scripted model". extra are further flags.
func startHTTP(t *testing.T, extra ...string) (*App, string) {
	t.Helper()
	model, err := scripted.New(func(req scripted.Request) scripted.Reply {
		switch {
		case req.JSON:
			return scripted.Text(`{"memories":[]}`)
		case strings.Contains(req.LastUser(), "slow"):
			return scripted.Reply{Text: "too late", Delay: 5 * time.Minute}
		}
		return scripted.Text("hello from the scripted model")
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(model.Close)
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.yaml")
	if err := os.WriteFile(keys, []byte(httpTestKey+": "+httpTestUser+"\n"+bobKey+": bob\n"+operatorKey+": {role: operator, name: ops}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var cfg Config
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(append([]string{"--listen=127.0.0.1:0", "--http-listen=127.0.0.1:0", "--data-dir=" + filepath.Join(dir, "data"),
		"--auth-file=" + keys, "--model-base-url=" + model.URL(), "--model=scripted", "--shutdown-timeout=5s"}, extra...)); err != nil {
		t.Fatal(err)
	}
	a, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	a.Start()
	t.Cleanup(func() { _ = a.Stop() })
	if a.HTTPAddr() == "" {
		t.Fatal("no HTTP address with --http-listen")
	}
	return a, "http://" + a.HTTPAddr()
}

// do makes one request with the API key as a bearer token (a key starting "x-api-key " goes
// in that header instead) and returns the status and body.
func do(t *testing.T, method, url, key, body string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if k, ok := strings.CutPrefix(key, "x-api-key "); ok {
		req.Header.Set("X-Api-Key", k)
	} else if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, raw
}

// call makes one JSON request and decodes the answer into a map.
func call(t *testing.T, method, url, key, body string) (int, map[string]any) {
	t.Helper()
	code, raw := do(t, method, url, key, body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: %d, not JSON: %q", method, url, code, raw)
	}
	return code, out
}

// sseEvent is one server-sent event.
type sseEvent struct {
	event, id, data string
}

// readEvents reads server-sent events until the stream ends or stop says so.
func readEvents(t *testing.T, body io.Reader, stop func(sseEvent) bool) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.data != "" {
				out = append(out, cur)
				if stop != nil && stop(cur) {
					return out
				}
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: "):
			cur.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			cur.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			if cur.data != "" {
				t.Errorf("an event with two data lines: %q", line)
			}
			cur.data = strings.TrimPrefix(line, "data: ")
		default:
			t.Errorf("unexpected line in the event stream: %q", line)
		}
	}
	return out
}

// getTurn reads a turn through the HTTP API, as alice; nil while it has no record.
func getTurn(t *testing.T, base, id string) *orchestratorv1.Turn {
	t.Helper()
	code, raw := do(t, "GET", base+"/v1/turns/"+id, httpTestKey, "")
	if code == http.StatusNotFound {
		return nil
	}
	var got orchestratorv1.GetTurnResponse
	if err := protojson.Unmarshal(raw, &got); err != nil {
		t.Fatalf("GET /v1/turns/%s: %d %s: %v", id, code, raw, err)
	}
	return got.GetTurn()
}

func TestHTTPAPI(t *testing.T) {
	_, base := startHTTP(t)

	// The OpenAPI document generated from the protos is served as committed.
	resp, err := http.Get(base + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" || string(doc) != hermesproto.OpenAPI {
		t.Errorf("GET /openapi.json: %d %s, %d bytes (committed: %d)", resp.StatusCode, resp.Header.Get("Content-Type"), len(doc), len(hermesproto.OpenAPI))
	}

	code, created := call(t, "POST", base+"/v1/sessions", httpTestKey, `{"title":"dinner"}`)
	if code != http.StatusOK {
		t.Fatalf("create session: %d %v", code, created)
	}
	sid, _ := created["session"].(map[string]any)["id"].(string)
	if sid == "" {
		t.Fatalf("create session: no id in %v", created)
	}

	// Errors keep their meaning: the gRPC code's HTTP status and a google.rpc.Status body.
	for _, tc := range []struct {
		name, method, path, key, body string
		status                        int
		grpcCode                      float64
	}{
		{"own session", "GET", "/v1/sessions/" + sid, httpTestKey, "", 200, 0},
		{"own session with X-Api-Key", "GET", "/v1/sessions/" + sid, "x-api-key " + httpTestKey, "", 200, 0},
		{"another user's session", "GET", "/v1/sessions/" + sid + "?user_id=alice", bobKey, "", 403, 7},
		{"missing session", "GET", "/v1/sessions/nope", httpTestKey, "", 404, 5},
		{"misspelt field", "POST", "/v1/sessions", httpTestKey, `{"titel":"x"}`, 400, 3},
		{"invalid message", "POST", "/v1/sessions/" + sid + "/messages", httpTestKey, `{"messages":[{"content":"no role"}]}`, 400, 3},
		{"no such route", "GET", "/v1/nothing", httpTestKey, "", 404, 5},
		{"body over the limit", "POST", "/v1/sessions", httpTestKey, `{"title":"` + strings.Repeat("x", 5<<20) + `"}`, 413, 8},
		// The credentials travel as metadata through the gRPC server's authentication and
		// authorization.
		{"no key", "GET", "/v1/sessions/" + sid, "", "", 401, 16},
		{"unknown key", "GET", "/v1/sessions/" + sid, "unknown-key-0123456789", "", 401, 16},
		{"a user registering a tool", "POST", "/v1/tools", httpTestKey, `{"spec":{"name":"x"}}`, 403, 7},
		{"an operator listing tools", "GET", "/v1/tools", operatorKey, "", 200, 0},
		{"missing turn", "GET", "/v1/turns/t1", httpTestKey, "", 404, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := call(t, tc.method, base+tc.path, tc.key, tc.body)
			if code != tc.status {
				t.Errorf("status %d, want %d: %v", code, tc.status, body)
			}
			if got, _ := body["code"].(float64); tc.status != 200 && got != tc.grpcCode {
				t.Errorf("gRPC code %v, want %v: %v", body["code"], tc.grpcCode, body)
			}
		})
	}

	t.Run("RunTurn streams server-sent events", func(t *testing.T) {
		req, _ := http.NewRequest("POST", base+"/v1/sessions/"+sid+"/turns", strings.NewReader(`{"text":"hi there"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+httpTestKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("status %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
		events := readEvents(t, resp.Body, nil)
		var kinds []string
		var text strings.Builder
		var turnID, user string
		for i, e := range events {
			var ev map[string]any
			if err := json.Unmarshal([]byte(e.data), &ev); err != nil {
				t.Fatalf("event %d is not JSON: %q", i, e.data)
			}
			if seq, _ := ev["seq"].(float64); e.id != strconv.Itoa(int(seq)) {
				t.Errorf("event %d: id %q, seq %v", i, e.id, ev["seq"])
			}
			for _, k := range []string{"started", "context", "memories", "delta", "completed", "failed"} {
				if ev[k] != nil {
					kinds = append(kinds, k)
				}
			}
			if s, ok := ev["started"].(map[string]any); ok {
				turnID, user = s["turn_id"].(string), s["user_id"].(string)
			}
			if d, ok := ev["delta"].(map[string]any); ok {
				text.WriteString(d["text"].(string))
			}
		}
		if len(kinds) == 0 || kinds[0] != "started" || kinds[len(kinds)-1] != "completed" {
			t.Errorf("events %v: want started first and completed last", kinds)
		}
		if text.String() != "hello from the scripted model" || user != httpTestUser {
			t.Errorf("streamed %q for %q", text.String(), user)
		}
		// The finished turn, through the gateway, with the key.
		code, got := call(t, "GET", base+"/v1/turns/"+turnID, httpTestKey, "")
		if code != 200 || got["turn"].(map[string]any)["answer"] != "hello from the scripted model" {
			t.Errorf("GET /v1/turns/%s: %d %v", turnID, code, got)
		}
	})

	t.Run("RunTurn errors before the stream", func(t *testing.T) {
		for _, tc := range []struct {
			name, key, body string
			status          int
		}{
			{"no key", "", `{"text":"hi"}`, 401},
			{"no text", httpTestKey, `{}`, 400},
			{"not JSON", httpTestKey, `{"text":`, 400},
		} {
			code, body := call(t, "POST", base+"/v1/sessions/"+sid+"/turns", tc.key, tc.body)
			if code != tc.status || body["message"] == "" {
				t.Errorf("%s: %d %v, want %d", tc.name, code, body, tc.status)
			}
		}
	})

	t.Run("a client that goes away cancels the turn", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/sessions/"+sid+"/turns", strings.NewReader(`{"text":"slow please"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+httpTestKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var turnID string
		readEvents(t, resp.Body, func(e sseEvent) bool {
			var ev struct {
				Started struct {
					TurnID string `json:"turn_id"`
				} `json:"started"`
			}
			_ = json.Unmarshal([]byte(e.data), &ev)
			turnID = ev.Started.TurnID
			return turnID != ""
		})
		cancel()
		resp.Body.Close()
		if turnID == "" {
			t.Fatal("no started event")
		}
		var last *orchestratorv1.Turn
		testenv.WaitFor(t, 60*time.Second, "the turn to end after the client went away", func() bool {
			last = getTurn(t, base, turnID)
			return last != nil && last.GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_RUNNING
		})
		// The orchestrator records the cancellation as CANCELLED, or as FAILED with the code
		// CANCELLED when it cut a backend call short; either way the client's leaving ended it.
		evs := last.GetEvents()
		if len(evs) == 0 {
			t.Fatalf("a turn without events: %v", last)
		}
		if code := evs[len(evs)-1].GetFailed().GetCode(); code != "CANCELED" && code != "CANCELLED" {
			t.Errorf("the turn did not end as cancelled: %v", last)
		}
	})
}

// TestMCPClientMetadataServed: with --mcpgateway.oauth-client-metadata-url naming the fixed
// path, the HTTP listener serves the OAuth client metadata document without credentials (the
// authorization server fetches it), naming that URL as its client id; a URL that cannot be a
// client id is refused at start.
func TestMCPClientMetadataServed(t *testing.T) {
	const docURL = "https://hermes.example.com/v1/mcp/oauth/client-metadata.json"
	const redirect = "https://hermes.example.com/v1/mcp/oauth/callback"
	_, base := startHTTP(t, "--mcpgateway.oauth-redirect-url="+redirect, "--mcpgateway.oauth-client-metadata-url="+docURL)
	code, body := do(t, http.MethodGet, base+"/v1/mcp/oauth/client-metadata.json", "", "")
	var doc struct {
		ClientID     string   `json:"client_id"`
		RedirectURIs []string `json:"redirect_uris"`
	}
	if err := json.Unmarshal(body, &doc); code != http.StatusOK || err != nil || doc.ClientID != docURL || len(doc.RedirectURIs) != 1 || doc.RedirectURIs[0] != redirect {
		t.Fatalf("HTTP %d: %s", code, body)
	}

	var cfg Config
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"--listen=127.0.0.1:0", "--data-dir=" + t.TempDir(), "--mcpgateway.oauth-redirect-url=" + redirect,
		"--mcpgateway.oauth-client-metadata-url=http://hermes.example.com/doc.json"}); err != nil {
		t.Fatal(err)
	}
	if a, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "oauth-client-metadata-url") {
		if a != nil {
			_ = a.Stop()
		}
		t.Fatalf("New with an http client metadata URL: %v", err)
	}
}
