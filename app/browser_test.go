package app

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermes-agent/hermes/internal/model/scripted"
)

// startNoKeys runs every target as the operator did — loopback, no keys — with the HTTP
// API and the profiler on, and returns the app, the API's base URL and the model's request
// count.
func startNoKeys(t *testing.T, args ...string) (*App, string, *atomic.Int64) {
	t.Helper()
	var calls atomic.Int64
	model, err := scripted.New(func(req scripted.Request) scripted.Reply {
		calls.Add(1)
		if req.JSON {
			return scripted.Text(`{"memories":[]}`)
		}
		return scripted.Text("hello")
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(model.Close)
	var cfg Config
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(append([]string{"--listen=127.0.0.1:0", "--http-listen=127.0.0.1:0", "--pprof-listen=127.0.0.1:0",
		"--data-dir=" + filepath.Join(t.TempDir(), "data"), "--model-base-url=" + model.URL(), "--model=scripted", "--shutdown-timeout=5s"}, args...)); err != nil {
		t.Fatal(err)
	}
	a, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	a.Start()
	t.Cleanup(func() { _ = a.Stop() })
	return a, "http://" + a.HTTPAddr(), &calls
}

// browserReq is a request as a browser (or another client) sends it.
type browserReq struct {
	method, url, host, origin, ctype, body string
	header                                 map[string]string
}

func (b browserReq) do(t *testing.T) (*http.Response, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, b.method, b.url, strings.NewReader(b.body))
	if err != nil {
		t.Fatal(err)
	}
	if b.host != "" {
		req.Host = b.host
	}
	for k, v := range map[string]string{"Origin": b.origin, "Content-Type": b.ctype} {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	for k, v := range b.header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp, raw
}

// refused checks a 403 whose google.rpc.Status message names what to configure.
func refused(t *testing.T, what string, resp *http.Response, body []byte, mention string) {
	t.Helper()
	var st struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("%s: HTTP %d %s, want 403", what, resp.StatusCode, body)
		return
	}
	if err := json.Unmarshal(body, &st); err != nil || st.Code != 7 || !strings.Contains(st.Message, mention) {
		t.Errorf("%s: refusal %s (%v), want a google.rpc.Status naming %s", what, body, err, mention)
	}
	if resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("%s: a CORS header without configured origins", what)
	}
}

// TestBrowserAttacksRefused replays issue 24's requests from a page in the operator's browser
// against the loopback API without keys: every write of a foreign page (text/plain, no
// preflight) and every request under a rebound name is refused, and nothing they asked for
// happens; non-browser clients and the API's own pages still work.
func TestBrowserAttacksRefused(t *testing.T) {
	a, base, modelCalls := startNoKeys(t)
	addr := a.HTTPAddr()
	const ct = "application/json"
	ok := func(r browserReq) []byte {
		t.Helper()
		resp, body := r.do(t)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s (Host %q, Origin %q): HTTP %d %s", r.method, r.url, r.host, r.origin, resp.StatusCode, body)
		}
		return body
	}

	// A non-browser client (no Origin, JSON) and a page of the API's own origin work.
	var created struct {
		Session struct{ ID string } `json:"session"`
	}
	body := ok(browserReq{method: "POST", url: base + "/v1/sessions", ctype: ct, body: `{"user_id":"alice","title":"dinner"}`})
	if err := json.Unmarshal(body, &created); err != nil || created.Session.ID == "" {
		t.Fatalf("create session: %s %v", body, err)
	}
	sid := created.Session.ID
	ok(browserReq{method: "POST", url: base + "/v1/memories", origin: "http://" + addr, ctype: ct + "; charset=utf-8",
		body: `{"user_id":"alice","type":"MEMORY_TYPE_FACT","content":"Alice is allergic to peanuts"}`})
	ok(browserReq{method: "GET", url: base + "/v1/sessions/" + sid + "/messages?user_id=alice", host: "localhost:" + strings.Split(addr, ":")[1]})
	before := modelCalls.Load()

	attacks := []struct{ name, path, body string }{
		{"register a webhook to an outside host", "/v1/tools", `{"spec":{"name":"evil_hook","description":"x","input_schema":"{\"type\":\"object\"}","http":{"url":"https://attacker.example/hook"}}}`},
		{"add an MCP server", "/v1/mcp/servers", `{"spec":{"name":"evil","http":{"url":"https://attacker.example/mcp"}}}`},
		{"plant a memory", "/v1/memories", `{"user_id":"alice","type":"MEMORY_TYPE_FACT","content":"planted by a web page"}`},
		{"erase a user's memories", "/v1/memories:forgetUser", `{"user_id":"alice"}`},
		{"run a tool", "/v1/tools/calculator:execute", `{"arguments":"{\"expression\":\"1+1\"}"}`},
		{"run a turn at the operator's cost", "/v1/sessions/" + sid + "/turns", `{"user_id":"alice","text":"hi"}`},
	}
	for _, at := range attacks {
		for _, v := range []struct {
			how, host, origin, ctype, mention string
		}{
			{"text/plain from a foreign page", "", "http://attacker.example", "text/plain", "--http-allowed-origins"},
			{"a form from a foreign page", "", "http://attacker.example", "application/x-www-form-urlencoded", "--http-allowed-origins"},
			{"JSON from a foreign page", "", "http://attacker.example", ct, "--http-allowed-origins"},
			{"text/plain without an Origin", "", "", "text/plain", "application/json"},
			{"JSON under a rebound name", "attacker.example:" + strings.Split(addr, ":")[1], "http://attacker.example:" + strings.Split(addr, ":")[1], ct, "--http-allowed-hosts"},
		} {
			resp, body := browserReq{method: "POST", url: base + at.path, host: v.host, origin: v.origin, ctype: v.ctype, body: at.body}.do(t)
			refused(t, at.name+" with "+v.how, resp, body, v.mention)
		}
	}

	// Nothing the pages asked for happened.
	if resp, body := (browserReq{method: "GET", url: base + "/v1/tools/evil_hook"}).do(t); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the page's tool: HTTP %d %s, want 404", resp.StatusCode, body)
	}
	if body := ok(browserReq{method: "GET", url: base + "/v1/mcp/servers"}); strings.Contains(string(body), "evil") {
		t.Errorf("the page's MCP server was added: %s", body)
	}
	if body := ok(browserReq{method: "GET", url: base + "/v1/memories?user_id=alice"}); !strings.Contains(string(body), "peanuts") || strings.Contains(string(body), "planted") {
		t.Errorf("alice's memories after the attacks: %s", body)
	}
	if body := ok(browserReq{method: "GET", url: base + "/v1/sessions/" + sid + "/turns?user_id=alice"}); strings.Contains(string(body), "turn_id") || modelCalls.Load() != before {
		t.Errorf("a turn ran: model calls %d → %d, turns %s", before, modelCalls.Load(), body)
	}

	// DNS rebinding: a page of attacker.example, resolved to 127.0.0.1, reads a user's messages.
	port := strings.Split(addr, ":")[1]
	resp, body := browserReq{method: "GET", url: base + "/v1/sessions/" + sid + "/messages?user_id=alice", host: "attacker.example:" + port}.do(t)
	refused(t, "a rebound page reading messages", resp, body, "--http-allowed-hosts")
	resp, body = browserReq{method: "GET", url: base + "/openapi.json", host: "attacker.example:" + port}.do(t)
	refused(t, "a rebound page reading the OpenAPI document", resp, body, "--http-allowed-hosts")

	// The profiler: the command line (and every profile) is not for a foreign Host.
	pprof := "http://" + a.PprofAddr() + "/debug/pprof/cmdline"
	resp, body = browserReq{method: "GET", url: pprof, host: "attacker.example:" + strings.Split(a.PprofAddr(), ":")[1]}.do(t)
	refused(t, "a rebound page reading the profiler's cmdline", resp, body, "--http-allowed-hosts")
	resp, body = browserReq{method: "GET", url: pprof, origin: "http://attacker.example"}.do(t)
	refused(t, "a foreign page reading the profiler's cmdline", resp, body, "--http-allowed-origins")
	ok(browserReq{method: "GET", url: pprof})
	// go tool pprof's symbol lookup still works; a page's text/plain one does not.
	symbol := "http://" + a.PprofAddr() + "/debug/pprof/symbol"
	ok(browserReq{method: "POST", url: symbol, ctype: "application/octet-stream", body: "0x1"})
	resp, body = browserReq{method: "POST", url: symbol, origin: "http://attacker.example", ctype: "text/plain", body: "0x1"}.do(t)
	refused(t, "a foreign page's symbol lookup", resp, body, "--http-allowed-origins")
}

// TestBrowserConfiguredHostsAndOrigins: an operator's public name and a console's origin, once
// configured, pass; the console's origin gets CORS answers, others still get 403.
func TestBrowserConfiguredHostsAndOrigins(t *testing.T) {
	a, base, _ := startNoKeys(t, "--http-allowed-hosts=hermes.test,*.corp.test", "--http-allowed-origins=https://console.example")
	port := strings.Split(a.HTTPAddr(), ":")[1]
	for _, host := range []string{"hermes.test:" + port, "api.corp.test:" + port} {
		if resp, body := (browserReq{method: "GET", url: base + "/v1/sessions?user_id=alice", host: host}).do(t); resp.StatusCode != http.StatusOK {
			t.Errorf("Host %s: HTTP %d %s", host, resp.StatusCode, body)
		}
	}
	resp, body := browserReq{method: "POST", url: base + "/v1/sessions", origin: "https://console.example", ctype: "application/json", body: `{"user_id":"alice"}`}.do(t)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Access-Control-Allow-Origin") != "https://console.example" {
		t.Errorf("the configured origin: HTTP %d, Access-Control-Allow-Origin %q: %s", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"), body)
	}
	resp, body = browserReq{method: "OPTIONS", url: base + "/v1/sessions", origin: "https://console.example",
		header: map[string]string{"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type"}}.do(t)
	if resp.StatusCode != http.StatusNoContent || !strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "Authorization") ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Methods"), "POST") {
		t.Errorf("the configured origin's preflight: HTTP %d %v %s", resp.StatusCode, resp.Header, body)
	}
	resp, body = browserReq{method: "OPTIONS", url: base + "/v1/sessions", origin: "http://attacker.example",
		header: map[string]string{"Access-Control-Request-Method": "POST"}}.do(t)
	refused(t, "a foreign preflight", resp, body, "--http-allowed-origins")
	resp, body = browserReq{method: "GET", url: base + "/v1/sessions?user_id=alice", host: "attacker.example:" + port}.do(t)
	refused(t, "an unconfigured name", resp, body, "--http-allowed-hosts")
}

// TestBrowserGuardSettingsChecked: a mistyped setting stops the start with an error naming it.
func TestBrowserGuardSettingsChecked(t *testing.T) {
	for _, arg := range []string{"--http-allowed-origins=console.example", "--http-allowed-hosts=https://hermes.test/"} {
		var cfg Config
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		cfg.RegisterFlags(fs)
		if err := fs.Parse([]string{"--target=session", "--listen=127.0.0.1:0", "--http-listen=127.0.0.1:0", "--data-dir=" + t.TempDir(), arg}); err != nil {
			t.Fatal(err)
		}
		a, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
		if err == nil {
			_ = a.Stop()
			t.Errorf("%s: started", arg)
		} else if !strings.Contains(err.Error(), "--http-allowed") {
			t.Errorf("%s: %v", arg, err)
		}
	}
}

// TestHTTPUnauthenticatedNamesTheHeader: an HTTP caller without a key is told to send the
// Authorization header, with the Bearer challenge, not gRPC metadata.
func TestHTTPUnauthenticatedNamesTheHeader(t *testing.T) {
	_, base := startHTTP(t)
	resp, body := browserReq{method: "GET", url: base + "/v1/sessions?user_id=alice"}.do(t)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "Authorization: Bearer <key>") ||
		strings.Contains(string(body), "metadata") || resp.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("HTTP %d, WWW-Authenticate %q: %s", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
	}
}

// TestHTTPToolSpecsRedactedForUsers: GET /v1/tools through the gateway shows a user key the
// webhook without its query token, path and header values; the operator sees them.
func TestHTTPToolSpecsRedactedForUsers(t *testing.T) {
	_, base := startHTTP(t)
	spec := `{"spec":{"name":"hook","description":"x","input_schema":"{\"type\":\"object\"}",` +
		`"http":{"url":"https://hooks.example.com/services/T0/B0?token=s3cret","headers":{"X-Tenant":"acme-4f2a9c"}}}}`
	if code, body := do(t, "POST", base+"/v1/tools", operatorKey, spec); code != http.StatusOK {
		t.Fatalf("register: %d %s", code, body)
	}
	for _, path := range []string{"/v1/tools", "/v1/tools/hook"} {
		code, body := do(t, "GET", base+path, httpTestKey, "")
		if code != http.StatusOK || strings.Contains(string(body), "s3cret") || strings.Contains(string(body), "acme-4f2a9c") ||
			strings.Contains(string(body), "services/T0") || !strings.Contains(string(body), "https://hooks.example.com/REDACTED?token=REDACTED") {
			t.Errorf("a user's GET %s: %d %s", path, code, body)
		}
		code, body = do(t, "GET", base+path, operatorKey, "")
		if code != http.StatusOK || !strings.Contains(string(body), "services/T0/B0?token=s3cret") || !strings.Contains(string(body), "acme-4f2a9c") {
			t.Errorf("the operator's GET %s: %d %s", path, code, body)
		}
	}
}
