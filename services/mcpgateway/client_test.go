package mcpgateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/model"
	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/secretenv"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	"github.com/hermes-agent/hermes/services/mcpgateway/mcpgatewaytest"
)

// addReady adds a server to g and fails the test unless it becomes ready.
func gwReady(t *testing.T, g *Gateway, spec *pb.ServerSpec) *pb.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	srv, err := g.AddServer(ctx, spec, true)
	if err != nil || srv.GetState() != pb.ServerState_SERVER_STATE_READY {
		t.Fatalf("AddServer(%s) = %v, %v", spec.GetName(), srv, err)
	}
	return srv
}

func gwCall(t *testing.T, g *Gateway, server, tool, args string) *pb.CallToolResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := g.CallTool(ctx, &pb.CallToolRequest{Server: server, Tool: tool, Arguments: args})
	if err != nil {
		t.Fatalf("CallTool(%s/%s): %v", server, tool, err)
	}
	return r
}

// TestHelperServerDefects covers the client-side defects with the helper server over stdio:
// a banner line on stdout (5), resource and prompt error codes (6), capped structured content
// (3), audience, progress, and the instructions kept.
func TestHelperServerDefects(t *testing.T) {
	g := New(testConfig(), Options{Logger: testLogger(t)})
	defer g.Close()
	srv := gwReady(t, g, mcpgatewaytest.HelperStdio(t, "helper", map[string]string{"HERMES_HELPER_BANNER": "1", "HERMES_HELPER_APPEND": filepath.Join(t.TempDir(), "journal")}))
	if srv.GetInstructions() != "Use append_line to add lines to the journal." {
		t.Errorf("instructions = %q", srv.GetInstructions())
	}
	ctx := context.Background()

	t.Run("banner line skipped", func(t *testing.T) {
		if r := gwCall(t, g, "helper", "json_text", `{}`); !r.GetSuccess() {
			t.Fatalf("json_text = %v", r)
		}
	})
	t.Run("codes", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			err  error
			want codes.Code
		}{
			{"unknown resource", func() error { _, err := g.ReadResource(ctx, "helper", "test://missing"); return err }(), codes.NotFound},
			{"unknown prompt", func() error { _, err := g.GetPrompt(ctx, "helper", "nope", nil); return err }(), codes.NotFound},
			{"missing prompt argument", func() error { _, err := g.GetPrompt(ctx, "helper", "greet", nil); return err }(), codes.InvalidArgument},
		} {
			if got := status.Code(rpc.Classify(ctx, nil, "test", tc.err)); got != tc.want {
				t.Errorf("%s: %v (%v), want %v", tc.name, got, tc.err, tc.want)
			}
		}
		if r, err := g.GetPrompt(ctx, "helper", "greet", map[string]string{"who": "you"}); err != nil || r.GetMessages()[0].GetText() != "hello you" {
			t.Errorf("GetPrompt = %v, %v", r, err)
		}
	})
	t.Run("structured content capped", func(t *testing.T) {
		r := gwCall(t, g, "helper", "big_structured", `{}`)
		if !r.GetSuccess() || !r.GetTruncated() || r.GetStructured() || len(r.GetOutput()) > testConfig().MaxTextBytes+200 {
			t.Fatalf("big_structured: success %v truncated %v structured %v, %d bytes", r.GetSuccess(), r.GetTruncated(), r.GetStructured(), len(r.GetOutput()))
		}
	})
	t.Run("audience", func(t *testing.T) {
		r := gwCall(t, g, "helper", "audience", `{}`)
		if r.GetOutput() != "for the model" || !cmp.Equal(r.GetUserText(), []string{"only for the user"}) {
			t.Errorf("audience: output %q, user text %q", r.GetOutput(), r.GetUserText())
		}
	})
	t.Run("progress", func(t *testing.T) {
		var mu sync.Mutex
		var got []string
		r, err := g.CallToolProgress(ctx, &pb.CallToolRequest{Server: "helper", Tool: "progress"}, func(p *pb.Progress) {
			mu.Lock()
			got = append(got, p.GetMessage())
			mu.Unlock()
		})
		if err != nil || !r.GetSuccess() {
			t.Fatalf("progress: %v %v", r, err)
		}
		// The SDK hands notifications over asynchronously, so one that arrives after the result
		// (too late for anyone waiting) may be missing; those that arrive are in order.
		mu.Lock()
		defer mu.Unlock()
		want := []string{"step 1", "step 2", "step 3"}
		if len(got) == 0 || !cmp.Equal(got, want[:min(len(got), 3)]) {
			t.Errorf("progress messages = %q, want a prefix of %q", got, want)
		}
	})
	t.Run("templates, completions, subscriptions", func(t *testing.T) {
		tpl, err := g.ListResourceTemplates(ctx, "helper", "")
		if err != nil || len(tpl.GetTemplates()) != 1 || tpl.GetTemplates()[0].GetUriTemplate() != "test://items/{id}" {
			t.Errorf("ListResourceTemplates = %v, %v", tpl, err)
		}
		comp, err := g.Complete(ctx, &pb.CompleteRequest{Server: "helper", Ref: &pb.CompleteRequest_Prompt{Prompt: "greet"}, Argument: "who", Value: "al"})
		if err != nil || !cmp.Equal(comp.GetValues(), []string{"alice", "albert"}) {
			t.Errorf("Complete = %v, %v", comp, err)
		}
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		events := make(chan bool, 4)
		watched := make(chan error, 1)
		go func() {
			watched <- g.WatchResource(wctx, "helper", "test://known", func(updated bool) error {
				events <- updated
				return nil
			})
		}()
		if first := <-events; first {
			t.Fatal("the first event is an update, want the subscription's confirmation")
		}
		gwCall(t, g, "helper", "touch", `{}`)
		select {
		case updated := <-events:
			if !updated {
				t.Error("second event is not an update")
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no update event after the server reported the resource updated")
		}
		cancel()
		if err := <-watched; err != nil {
			t.Errorf("WatchResource ended with %v", err)
		}
	})
	t.Run("annotations", func(t *testing.T) {
		e := g.lookup("", "helper", "append_idempotent")
		if e == nil || !e.spec.GetIdempotent() || !e.spec.GetAnnotations().GetIdempotentHint() || e.spec.GetAnnotations().GetDestructiveHint() {
			t.Fatalf("append_idempotent spec: %v", e.spec)
		}
		a := g.lookup("", "helper", "append_line").spec.GetAnnotations()
		if a.GetTitle() != "Append" || !a.GetDestructiveHint() || a.IdempotentHint != nil || a.ReadOnlyHint != nil {
			t.Errorf("append_line annotations: %v", a)
		}
	})
}

// TestEverythingClientFeatures: tasks (defect 4), progress, sampling and elicitation against the
// everything reference server over stdio.
func TestEverythingClientFeatures(t *testing.T) {
	sampler := &scriptedSampler{answer: "a sampled answer"}
	g := New(testConfig(), Options{Logger: testLogger(t), Sampler: sampler})
	defer g.Close()
	spec := everythingStdio(t, "ev", "ev")
	spec.Sampling = &pb.SamplingPolicy{Allow: true, MaxTokens: 50}
	gwReady(t, g, spec)
	tools, _ := g.Tools("ev")
	support := map[string]string{}
	for _, tl := range tools {
		support[tl.GetOriginalName()] = tl.GetTaskSupport()
	}
	if support["simulate-research-query"] != "required" {
		t.Fatalf("simulate-research-query task support = %q", support["simulate-research-query"])
	}
	ctx := context.Background()

	t.Run("task tool", func(t *testing.T) {
		var mu sync.Mutex
		var msgs []string
		r, err := g.CallToolProgress(ctx, &pb.CallToolRequest{Server: "ev", Tool: "simulate-research-query", Arguments: `{"topic": "tides"}`}, func(p *pb.Progress) {
			mu.Lock()
			msgs = append(msgs, p.GetMessage())
			mu.Unlock()
		})
		if err != nil || !r.GetSuccess() || !strings.Contains(r.GetOutput(), "Research Report: tides") {
			t.Fatalf("simulate-research-query = %v, %v", r, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(msgs) == 0 {
			t.Error("no task status messages reported as progress")
		}
	})
	t.Run("progress", func(t *testing.T) {
		n := 0
		var mu sync.Mutex
		r, err := g.CallToolProgress(ctx, &pb.CallToolRequest{Server: "ev", Tool: "trigger-long-running-operation", Arguments: `{"duration": 1, "steps": 4}`}, func(p *pb.Progress) {
			mu.Lock()
			n++
			mu.Unlock()
		})
		if err != nil || !r.GetSuccess() {
			t.Fatalf("long running operation = %v, %v", r, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if n < 3 {
			t.Errorf("%d progress reports, want 4", n)
		}
	})
	t.Run("sampling", func(t *testing.T) {
		r := gwCall(t, g, "ev", "trigger-sampling-request", `{"prompt": "say hi", "maxTokens": 500}`)
		if !r.GetSuccess() || !strings.Contains(r.GetOutput(), "a sampled answer") {
			t.Fatalf("sampling = %v", r)
		}
		if got := sampler.last().MaxTokens; got != 50 {
			t.Errorf("sampling max tokens = %d, want the operator's cap 50", got)
		}
	})
	t.Run("elicitation declined", func(t *testing.T) {
		r := gwCall(t, g, "ev", "trigger-elicitation-request", `{}`)
		if !strings.Contains(strings.ToLower(r.GetOutput()), "decline") {
			t.Errorf("elicitation = %v", r)
		}
	})
}

// TestSamplingOffByDefault: a server whose spec does not allow sampling is refused.
func TestSamplingOffByDefault(t *testing.T) {
	sampler := &scriptedSampler{answer: "should not be used"}
	g := New(testConfig(), Options{Logger: testLogger(t), Sampler: sampler})
	defer g.Close()
	gwReady(t, g, everythingStdio(t, "ev", "ev"))
	r := gwCall(t, g, "ev", "trigger-sampling-request", `{"prompt": "say hi"}`)
	if r.GetSuccess() && strings.Contains(r.GetOutput(), "should not be used") {
		t.Fatalf("sampling ran without permission: %v", r)
	}
	if len(sampler.reqs) != 0 {
		t.Errorf("the model was called %d times", len(sampler.reqs))
	}
}

// scriptedSampler stands in for Hermes' model in the sampling tests.
type scriptedSampler struct {
	answer string
	mu     sync.Mutex
	reqs   []model.Request
}

func (s *scriptedSampler) Complete(_ context.Context, req model.Request) (*model.Response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, req)
	return &model.Response{Content: s.answer, Model: "scripted", FinishReason: "stop"}, nil
}

func (s *scriptedSampler) last() model.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reqs) == 0 {
		return model.Request{}
	}
	return s.reqs[len(s.reqs)-1]
}

// TestOAuthClientCredentialsTokenURL: with a configured token endpoint, the gateway gets a token
// with the client credentials grant (client_secret_post here) and sends it on every request,
// the side channel's included.
func TestOAuthClientCredentialsTokenURL(t *testing.T) {
	var mu sync.Mutex
	var tokenForms []url.Values
	tokenSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		mu.Lock()
		tokenForms = append(tokenForms, r.PostForm)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"access_token":"tok-1","token_type":"Bearer","expires_in":3600}`))
	}))
	defer tokenSrv.Close()
	var unauthorized atomic.Int64
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return mcpgatewaytest.HelperServer() }, nil)
	mcpSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok-1" {
			unauthorized.Add(1)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		mcpHandler.ServeHTTP(w, r)
	}))
	defer mcpSrv.Close()
	getenv := func(k string) string {
		if k == "OAUTH_SECRET" {
			return "s3cret"
		}
		return os.Getenv(k)
	}
	g := New(testConfig(), Options{Logger: testLogger(t), Getenv: getenv, Secrets: secretenv.New([]string{"OAUTH_SECRET"}, nil)})
	defer g.Close()
	spec := httpSpec("oauth", "oauth", mcpSrv.URL)
	spec.GetHttp().Oauth = &pb.OAuthClientCredentials{TokenUrl: tokenSrv.URL, ClientId: "hermes", ClientSecretEnv: "OAUTH_SECRET", Scopes: []string{"mcp"}, AuthMethod: "client_secret_post"}
	gwReady(t, g, spec)
	if r := gwCall(t, g, "oauth", "json_text", `{}`); !r.GetSuccess() {
		t.Fatalf("json_text = %v", r)
	}
	if n := unauthorized.Load(); n != 0 {
		t.Errorf("%d requests without the token", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(tokenForms) != 1 {
		t.Fatalf("%d token requests, want 1 (the token is cached)", len(tokenForms))
	}
	f := tokenForms[0]
	if f.Get("grant_type") != "client_credentials" || f.Get("client_id") != "hermes" || f.Get("client_secret") != "s3cret" || f.Get("scope") != "mcp" {
		t.Errorf("token request form %v", f)
	}
}

// TestElicitationAsk: in "ask" mode a server's request for input reaches whoever waits for the
// call as Progress.elicitation, and the answer given with AnswerElicitation is the server's; an
// answer with a wrong action or an unknown id is refused, and with nobody answering the request
// is declined when the wait ends.
func TestElicitationAsk(t *testing.T) {
	cfg := testConfig()
	cfg.ElicitTimeout = 3 * time.Second
	g := New(cfg, Options{Logger: testLogger(t)})
	defer g.Close()
	srv := NewServer(g)
	spec := everythingStdio(t, "ev", "ev")
	spec.Elicitation = "ask"
	gwReady(t, g, spec)
	ctx := context.Background()

	if _, err := srv.AnswerElicitation(ctx, &pb.AnswerElicitationRequest{Id: "0123456789abcdef0123456789abcdef", Action: "accept"}); status.Code(rpc.Classify(ctx, nil, "", err)) != codes.NotFound {
		t.Errorf("answer to an unknown id: %v, want NOT_FOUND", err)
	}
	t.Run("answered", func(t *testing.T) {
		var mu sync.Mutex
		var seen *pb.Elicitation
		var answerErrs []error
		r, err := g.CallToolProgress(ctx, &pb.CallToolRequest{Server: "ev", Tool: "trigger-elicitation-request", Arguments: `{}`}, func(p *pb.Progress) {
			e := p.GetElicitation()
			if e == nil {
				return
			}
			mu.Lock()
			seen = e
			mu.Unlock()
			_, bad := srv.AnswerElicitation(ctx, &pb.AnswerElicitationRequest{Id: e.GetId(), Action: "maybe"})
			_, err := srv.AnswerElicitation(ctx, &pb.AnswerElicitationRequest{Id: e.GetId(), Action: "accept", Content: formAnswer(t, e.GetRequestedSchema())})
			mu.Lock()
			answerErrs = append(answerErrs, bad, err)
			mu.Unlock()
		})
		if err != nil {
			t.Fatalf("CallToolProgress: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if seen == nil || len(seen.GetId()) != 32 || seen.GetServer() != "ev" || seen.GetRequestedSchema() == "" || seen.GetExpiresAt() == nil {
			t.Fatalf("elicitation event %v", seen)
		}
		if status.Code(rpc.Classify(ctx, nil, "", answerErrs[0])) != codes.InvalidArgument || answerErrs[1] != nil {
			t.Errorf("answers: bad action %v (want INVALID_ARGUMENT), accept %v", answerErrs[0], answerErrs[1])
		}
		if !strings.Contains(r.GetOutput(), "Ada Lovelace") {
			t.Errorf("the server did not get the answer: %v", r)
		}
		if _, err := srv.AnswerElicitation(ctx, &pb.AnswerElicitationRequest{Id: seen.GetId(), Action: "accept"}); status.Code(rpc.Classify(ctx, nil, "", err)) != codes.NotFound {
			t.Errorf("a second answer: %v, want NOT_FOUND", err)
		}
	})
	t.Run("nobody waits", func(t *testing.T) {
		r := gwCall(t, g, "ev", "trigger-elicitation-request", `{}`)
		if !strings.Contains(strings.ToLower(r.GetOutput()), "decline") {
			t.Errorf("elicitation with nobody to ask = %v, want declined", r)
		}
	})
	t.Run("two calls in flight", func(t *testing.T) {
		// The request names no call: with another call of the server running (perhaps another
		// user's), it is shown to nobody and declined.
		long := make(chan error, 1)
		started := make(chan struct{})
		var once sync.Once
		go func() {
			_, err := g.CallToolProgress(ctx, &pb.CallToolRequest{Server: "ev", Tool: "trigger-long-running-operation", Arguments: `{"duration": 3, "steps": 3}`}, func(*pb.Progress) {
				once.Do(func() { close(started) })
			})
			long <- err
		}()
		<-started
		var asked atomic.Bool
		r, err := g.CallToolProgress(ctx, &pb.CallToolRequest{Server: "ev", Tool: "trigger-elicitation-request", Arguments: `{}`}, func(p *pb.Progress) {
			if p.GetElicitation() != nil {
				asked.Store(true)
			}
		})
		if err != nil || asked.Load() || !strings.Contains(strings.ToLower(r.GetOutput()), "decline") {
			t.Errorf("elicitation with two calls in flight = %v, %v (shown %v), want declined, shown to nobody", r, err, asked.Load())
		}
		if err := <-long; err != nil {
			t.Errorf("the long call: %v", err)
		}
	})
	t.Run("nobody answers", func(t *testing.T) {
		var asked atomic.Bool
		r, err := g.CallToolProgress(ctx, &pb.CallToolRequest{Server: "ev", Tool: "trigger-elicitation-request", Arguments: `{}`}, func(p *pb.Progress) {
			if p.GetElicitation() != nil {
				asked.Store(true)
			}
		})
		if err != nil || !asked.Load() || !strings.Contains(strings.ToLower(r.GetOutput()), "decline") {
			t.Errorf("unanswered elicitation = %v, %v (asked %v), want asked, then declined", r, err, asked.Load())
		}
	})
}

// formAnswer fills the required fields of an elicitation form's schema with plausible values,
// "name" with "Ada Lovelace".
func formAnswer(t *testing.T, schema string) string {
	t.Helper()
	var s struct {
		Properties map[string]struct {
			Type    string  `json:"type"`
			Format  string  `json:"format"`
			Enum    []any   `json:"enum"`
			Minimum float64 `json:"minimum"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if err := json.Unmarshal([]byte(schema), &s); err != nil {
		t.Fatalf("requested schema %s: %v", schema, err)
	}
	out := map[string]any{}
	for _, name := range append(s.Required, "name") {
		p, ok := s.Properties[name]
		switch {
		case !ok:
		case name == "name":
			out[name] = "Ada Lovelace"
		case len(p.Enum) > 0:
			out[name] = p.Enum[0]
		case p.Type == "boolean":
			out[name] = true
		case p.Type == "number" || p.Type == "integer":
			out[name] = max(p.Minimum, 1)
		case p.Format == "email":
			out[name] = "ada@example.com"
		case p.Format == "date":
			out[name] = "2026-01-01"
		case p.Format == "uri":
			out[name] = "https://example.com"
		default:
			out[name] = "x"
		}
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// TestElicitationRelay: an answer that reaches another gateway replica is carried over NATS to
// the replica that holds the request.
func TestElicitationRelay(t *testing.T) {
	nc, err := nats.Connect("nats://127.0.0.1:4222")
	if err != nil {
		t.Fatalf("NATS at 127.0.0.1:4222 is required: %v", err)
	}
	defer nc.Close()
	prefix := "test.elicitation." + strconv.FormatInt(time.Now().UnixNano(), 36)
	holder := New(testConfig(), Options{Logger: testLogger(t), ElicitRelay: NewNATSElicitRelay(nc, prefix)})
	defer holder.Close()
	other := New(testConfig(), Options{Logger: testLogger(t), ElicitRelay: NewNATSElicitRelay(nc, prefix)})
	defer other.Close()
	spec := everythingStdio(t, "ev", "ev")
	spec.Elicitation = "ask"
	gwReady(t, holder, spec)
	ctx := context.Background()
	var answerErr atomic.Value
	r, err := holder.CallToolProgress(ctx, &pb.CallToolRequest{Server: "ev", Tool: "trigger-elicitation-request", Arguments: `{}`}, func(p *pb.Progress) {
		if e := p.GetElicitation(); e != nil {
			_, err := NewServer(other).AnswerElicitation(ctx, &pb.AnswerElicitationRequest{Id: e.GetId(), Action: "accept", Content: formAnswer(t, e.GetRequestedSchema())})
			answerErr.Store(fmt.Sprint(err))
		}
	})
	if err != nil || answerErr.Load() != "<nil>" || !strings.Contains(r.GetOutput(), "Ada Lovelace") {
		t.Fatalf("answered through the other replica: %v, %v (answer: %v)", r, err, answerErr.Load())
	}
	if _, err := NewServer(other).AnswerElicitation(ctx, &pb.AnswerElicitationRequest{Id: "0123456789abcdef0123456789abcdef", Action: "decline"}); status.Code(rpc.Classify(ctx, nil, "", err)) != codes.NotFound {
		t.Errorf("an unknown id through the relay: %v, want NOT_FOUND", err)
	}
}

// TestOAuthClientCredentialsStepUp: a 403 insufficient_scope to a request with a client
// credentials token gets a new token for the union of the asked and the challenged scopes, and
// the request is sent once more; a challenge for scopes already asked for is not retried.
func TestOAuthClientCredentialsStepUp(t *testing.T) {
	for _, tc := range []struct {
		name        string
		challenge   string
		wantSuccess bool
		wantScopes  []string // the scope of each token request
	}{
		{"new scope: a wider token and one retry", "mcp tools:写", true, []string{"mcp", "mcp tools:写"}},
		{"only the new scope challenged: the union is asked", "tools:写", true, []string{"mcp", "mcp tools:写"}},
		{"scope already asked for: no loop", "mcp", false, []string{"mcp"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var scopes []string
			tokenSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_ = r.ParseForm()
				mu.Lock()
				scopes = append(scopes, r.PostForm.Get("scope"))
				mu.Unlock()
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(map[string]any{"access_token": "tok " + r.PostForm.Get("scope"), "token_type": "Bearer", "expires_in": 3600})
			}))
			defer tokenSrv.Close()
			mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return mcpgatewaytest.HelperServer() }, nil)
			mcpSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer tok ")
				if !ok {
					http.Error(w, "unauthorized", http.StatusUnauthorized)
					return
				}
				body, _ := io.ReadAll(r.Body)
				r.Body = io.NopCloser(bytes.NewReader(body))
				if bytes.Contains(body, []byte(`"tools/call"`)) && !slices.Contains(strings.Fields(tok), "tools:写") {
					w.Header().Set("WWW-Authenticate", `Bearer error="insufficient_scope", scope="`+tc.challenge+`"`)
					http.Error(w, "insufficient scope", http.StatusForbidden)
					return
				}
				mcpHandler.ServeHTTP(w, r)
			}))
			defer mcpSrv.Close()
			getenv := func(k string) string {
				if k == "OAUTH_SECRET" {
					return "s3cret"
				}
				return os.Getenv(k)
			}
			g := New(testConfig(), Options{Logger: testLogger(t), Getenv: getenv, Secrets: secretenv.New([]string{"OAUTH_SECRET"}, nil)})
			defer g.Close()
			spec := httpSpec("oauth", "oauth", mcpSrv.URL)
			spec.GetHttp().Oauth = &pb.OAuthClientCredentials{TokenUrl: tokenSrv.URL, ClientId: "hermes", ClientSecretEnv: "OAUTH_SECRET", Scopes: []string{"mcp"}}
			gwReady(t, g, spec)
			r := gwCall(t, g, "oauth", "json_text", `{}`)
			if r.GetSuccess() != tc.wantSuccess {
				t.Fatalf("json_text = %v, want success %v", r, tc.wantSuccess)
			}
			mu.Lock()
			defer mu.Unlock()
			if diff := cmp.Diff(tc.wantScopes, scopes); diff != "" {
				t.Errorf("token requests' scopes (-want +got):\n%s", diff)
			}
		})
	}
}
