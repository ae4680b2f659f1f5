package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hermes-agent/hermes/internal/model/scripted"
	"github.com/hermes-agent/hermes/internal/testenv"
	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// TestJourney is a user's first session in the console: sign in with a key, remember something,
// start a session, run a turn whose model calls the calculator, watch the reply stream in with
// the tool call and its arguments, the context of each step and the recalled memory, then
// forget the memory.
func TestJourney(t *testing.T) {
	const question = "Multiply my favourite number seven by six"
	h := startHermes(t, func(req scripted.Request) scripted.Reply {
		switch {
		case lastUserIs(req, question) && req.HasTool("calculator"):
			return scripted.Calls(scripted.Call("calculator", map[string]any{"expression": "7 * 6"}))
		case req.LastMessage().Role == "tool":
			// Slow chunks, so the test sees the reply arrive while the turn still runs.
			var res struct {
				Output struct {
					Result float64 `json:"result"`
				} `json:"output"`
			}
			_ = json.Unmarshal([]byte(req.LastMessage().Content), &res)
			r := scripted.Text(fmt.Sprintf("Your favourite number, seven, times six is %g, as the calculator says.", res.Output.Result))
			r.ChunkDelay = 150 * time.Millisecond
			return r
		}
		return scripted.Text("ok")
	})
	b := newBrowser(t)
	b.open(h.base)
	b.signIn(aliceKey, "")

	// The key lives in this tab's session storage, nowhere else.
	stored := eval[struct {
		Session string `json:"session"`
		Local   int    `json:"local"`
	}](b, `({session: sessionStorage.getItem('hermes.key'), local: localStorage.length})`)
	if stored.Session != aliceKey || stored.Local != 0 {
		t.Errorf("storage: session %q, %d local items; want the key in session storage only", stored.Session, stored.Local)
	}

	// Remember something the turn will recall.
	const fact = "Alice's favourite number is seven"
	b.nav("memories")
	b.setValue("#remember-type", "MEMORY_TYPE_PREFERENCE")
	b.submit("#remember-content", fact, "#remember-form button[type=submit]")
	b.waitText("#memories-list", fact)
	memoryID := eval[string](b, `document.querySelector('#memories-list tr[data-memory]').dataset.memory`)

	// A new session.
	b.nav("sessions")
	b.submit("#session-title", "journey", "#session-create button[type=submit]")
	b.waitFor("the session view", `!document.getElementById('view-session').hidden`)
	b.waitText("#session-heading", "journey")

	// A turn, streamed.
	b.submit("#turn-text", question, "#turn-run")
	b.waitFor("part of the reply while the turn runs",
		`(() => { const s = document.querySelector('[data-testid=turn-status]'); const a = document.querySelector('[data-testid=turn-answer]');
		  return !!s && !!a && s.textContent === 'running' && a.textContent.includes('favourite'); })()`)
	b.waitText("[data-testid=turn-status]", "completed")
	if got := b.text("[data-testid=turn-answer]"); !strings.Contains(got, "42") {
		t.Errorf("answer %q, want the calculator's 42 in it", got)
	}
	// The tool call with its arguments, and its result.
	b.waitText(`li[data-tool="calculator"] pre.args`, `"expression": "7 * 6"`)
	b.waitText(`li.result.ok`, "42")
	// The context of each step as a bar of tokens by block.
	blocks := eval[[]string](b, `Array.from(document.querySelectorAll('#turn-view [data-testid=context-bar]')[0].querySelectorAll('.seg')).map((s) => s.dataset.block + '=' + s.dataset.tokens)`)
	bars := eval[int](b, `document.querySelectorAll('#turn-view [data-testid=context-bar]').length`)
	if bars != 2 || !hasPrefix(blocks, "system=") || !hasPrefix(blocks, "tool schemas=") || !hasPrefix(blocks, "current message=") || !hasPrefix(blocks, "memory=") {
		t.Errorf("context bars %d (want one per step, 2), first bar's blocks %q: want system, tool schemas, memory and current message", bars, blocks)
	}
	// The recalled memory, with its score.
	b.waitText(`[data-testid=recalled] tr[data-memory="`+memoryID+`"]`, fact)
	// The messages and the turn's record.
	b.waitText("#messages", question)
	b.waitText("#messages", "as the calculator says")
	b.waitText("#turns-list", "completed")
	b.waitText("#session-meta", "4 messages")
	b.checkClean("journey")
	b.run(chromedp.ScrollIntoView(chromedp.CSS("#view-session h1")))
	b.screenshot()

	// A recorded turn replays with the same view.
	b.click("#turns-list tr[data-turn]")
	b.waitText("#turn-view", "(recorded)")
	b.waitText(`#turn-view li[data-tool="calculator"] pre.args`, `"expression": "7 * 6"`)

	// Search finds the message in the session.
	b.nav("sessions")
	b.submit("#search-query", "favourite", "#search-form button[type=submit]")
	b.waitText("#search-results", question)

	// Forget the memory: gone from the page and from the API.
	b.nav("memories")
	b.waitText("#memories-list", fact)
	b.click(`#memories-list tr[data-memory="` + memoryID + `"] button.danger`)
	b.waitFor("the memory to go", fmt.Sprintf(`!document.querySelector('#memories-list tr[data-memory=%s]')`, js(memoryID)))
	var list struct {
		Memories []struct {
			ID string `json:"id"`
		} `json:"memories"`
	}
	if code := h.getJSON(t, aliceKey, "/v1/memories", &list); code != http.StatusOK {
		t.Fatalf("list memories: HTTP %d", code)
	}
	for _, m := range list.Memories {
		if m.ID == memoryID {
			t.Errorf("memory %s is still listed by the API after Forget in the console", memoryID)
		}
	}
	b.checkClean("journey end")
}

func hasPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

// payload would run script if it were ever treated as HTML, or followed as a link.
const payload = `<script>window.__pwned=1;alert(1)</script><img src=x onerror="window.__pwned=2;alert(2)">` +
	`<a href="javascript:window.__pwned=3">click me</a><svg onload="window.__pwned=4"></svg>` +
	`<iframe src="javascript:parent.__pwned=5"></iframe>`

// TestHostileContent puts markup and script in everything the console shows that users, models,
// tools and MCP servers write: the session title, the user's message, the model's answer and
// tool calls, a webhook tool's description and result, an MCP server's name, tool description
// and tool output, a memory. None of it may run, load or become an element; all of it is shown
// as text.
func TestHostileContent(t *testing.T) {
	h := startHermes(t, func(req scripted.Request) scripted.Reply {
		switch {
		case lastUserIs(req, "hostile") && req.HasTool("hostile_echo") && req.HasTool("evil_shout"):
			return scripted.Calls(scripted.Call("hostile_echo", map[string]any{"text": payload}),
				scripted.Call("evil_shout", map[string]any{"text": payload}))
		case req.LastMessage().Role == "tool":
			return scripted.Text("Here it is: " + payload)
		}
		return scripted.Text(payload)
	})
	ctx := as(opsKey)
	// A webhook tool that answers with the payload, registered by the operator with the payload
	// as its description.
	webhook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"echo": payload, "link": "javascript:window.__pwned=6"})
	}))
	t.Cleanup(webhook.Close)
	tools := toolsv1.NewToolServiceClient(h.conn)
	if _, err := tools.RegisterTool(ctx, &toolsv1.RegisterToolRequest{Spec: &toolsv1.ToolSpec{
		Name: "hostile_echo", Description: "Echoes text. " + payload,
		InputSchema: `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`,
		Executor:    &toolsv1.ToolSpec_Http{Http: &toolsv1.HTTPExecutor{Url: webhook.URL}},
	}}); err != nil {
		t.Fatal(err)
	}
	// A real MCP server whose name, tool description and tool output are the payload.
	srv := mcp.NewServer(&mcp.Implementation{Name: "evil " + payload, Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{
		Name: "shout", Description: "Shouts. " + payload,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`),
	}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "MCP says " + payload}}}, nil
	})
	mcpHTTP := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(func() {
		// The gateway holds a stream open; Close would wait for it.
		mcpHTTP.CloseClientConnections()
		mcpHTTP.Close()
	})
	gw := mcpgatewayv1.NewMCPGatewayServiceClient(h.conn)
	if _, err := gw.AddServer(ctx, &mcpgatewayv1.AddServerRequest{Wait: true, Spec: &mcpgatewayv1.ServerSpec{
		Name: "evil", Transport: &mcpgatewayv1.ServerSpec_Http{Http: &mcpgatewayv1.HTTPTransport{Url: mcpHTTP.URL}},
	}}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the MCP tool in the registry", func() bool {
		_, err := tools.GetTool(ctx, &toolsv1.GetToolRequest{Name: "evil_shout"})
		return err == nil
	})

	b := newBrowser(t)
	b.open(h.base)
	b.signIn(aliceKey, "")

	// A session whose title, message, answer, tool calls and results carry the payload.
	b.submit("#session-title", payload, "#session-create button[type=submit]")
	b.waitFor("the session view", `!document.getElementById('view-session').hidden`)
	b.waitText("#session-heading", "<script>")
	b.submit("#turn-text", "hostile "+payload, "#turn-run")
	b.waitText("[data-testid=turn-status]", "completed")
	b.waitText(`li[data-tool="hostile_echo"] pre.args`, "<img src=x onerror=")
	b.waitText("#turn-view", `"link": "javascript:window.__pwned=6"`)
	b.waitText("#turn-view", "MCP says <script>")
	b.waitText("[data-testid=turn-answer]", "Here it is: <script>window.__pwned=1")
	b.waitText("#messages", "<iframe src=")
	b.checkClean("session")

	// The session list and a search hit.
	b.nav("sessions")
	b.waitText("#sessions-list", "<svg onload=")
	b.submit("#search-query", "hostile", "#search-form button[type=submit]")
	b.waitText("#search-results", "<script>")
	b.checkClean("sessions")

	// A memory.
	b.nav("memories")
	b.submit("#remember-content", "Alice said "+payload, "#remember-form button[type=submit]")
	b.waitText("#memories-list", `<a href="javascript:`)
	// The recall's own rows, not the list still shown until its answer comes. The query is a
	// word the memory has five times: one word of a long memory ("Alice") scores under the
	// lexical floor, as BM25 means it to.
	b.submit("#recall-query", "pwned", "#recall-form button[type=submit]")
	b.waitText("#memories-meta", "1 recalled for the query")
	b.waitText("#memories-list", `<a href="javascript:`)
	b.checkClean("memories")

	// The tools and MCP servers, as the operator sees them.
	b.signOut()
	b.signIn(opsKey, "alice")
	b.nav("tools")
	b.waitText(`#tools-list tr[data-tool="hostile_echo"]`, "<img src=x")
	b.waitText(`#tools-list tr[data-tool="evil_shout"]`, "Shouts. <script>")
	b.waitText(`#mcp-list tr[data-server="evil"]`, "<svg onload=")
	b.checkClean("tools")
}

// TestOtherUsersSession: a second user's key sees neither the first user's sessions nor their
// messages, in the list, by address or by search; operator actions stay hidden from user keys.
func TestOtherUsersSession(t *testing.T) {
	h := startHermes(t, func(scripted.Request) scripted.Reply { return scripted.Text("ok") })
	sessions := sessionv1.NewSessionServiceClient(h.conn)
	created, err := sessions.CreateSession(as(aliceKey), &sessionv1.CreateSessionRequest{Title: "alice-private"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	if _, err := sessions.AppendMessages(as(aliceKey), &sessionv1.AppendMessagesRequest{SessionId: id, Messages: []*sessionv1.NewMessage{{
		Role: sessionv1.Role_ROLE_USER, Kind: sessionv1.MessageKind_MESSAGE_KIND_TEXT, Content: "my secret word is marmalade",
	}}}); err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t)
	b.open(h.base)
	b.signIn(aliceKey, "")
	b.waitText("#sessions-list", "alice-private")
	b.click(`#sessions-list tr[data-session="` + id + `"]`)
	b.waitText("#messages", "marmalade")
	b.signOut()
	// Nothing of alice's stays in the page for the next key.
	if got := eval[string](b, `document.querySelector('main').textContent`); strings.Contains(got, "marmalade") || strings.Contains(got, "alice-private") {
		t.Errorf("after sign-out the page still holds alice's data")
	}

	b.signIn(bobKey, "")
	b.waitText("#sessions-list", "No sessions yet.")
	if got := b.text("#sessions-list"); strings.Contains(got, "alice-private") {
		t.Errorf("bob's session list shows alice's session: %q", got)
	}
	// By address: refused, and nothing of the session is shown.
	eval[string](b, `window.location.hash = '#/session/' + `+js(id))
	b.waitFor("the refusal", `!document.getElementById('error').hidden`)
	if got := b.text("#error"); !strings.Contains(got, "another user") && !strings.Contains(strings.ToLower(got), "not found") {
		t.Errorf("error bar %q, want the refusal", got)
	}
	if got := b.text("#view-session"); strings.Contains(got, "alice-private") || strings.Contains(got, "marmalade") {
		t.Errorf("bob sees alice's session: %q", got)
	}
	// By search.
	b.nav("sessions")
	b.submit("#search-query", "marmalade", "#search-form button[type=submit]")
	b.waitText("#search-results", "No message matches.")
	// A user key gets no operator actions, and no MCP servers.
	b.nav("tools")
	b.waitText("#mcp-meta", "shown to operator")
	ops := eval[int](b, `document.querySelectorAll('#view-tools button.danger').length`)
	if ops != 0 {
		t.Errorf("a user key sees %d operator buttons", ops)
	}
	// An operator does.
	b.signOut()
	b.signIn(opsKey, "bob")
	b.nav("tools")
	b.waitFor("operator buttons", `document.querySelectorAll('#tools-list button.danger').length > 0`)
	b.checkClean("other user")
}

// TestLoopbackWithoutKeys: on loopback without API keys, as the API allows, the console signs in
// with no key and acts for the user it is told.
func TestLoopbackWithoutKeys(t *testing.T) {
	h := serveHermes(t, func(scripted.Request) scripted.Reply { return scripted.Text("hello carol") }, false)
	b := newBrowser(t)
	b.open(h.base)
	b.signIn("", "carol")
	b.waitText("#who", "user carol")
	b.submit("#session-title", "no keys", "#session-create button[type=submit]")
	b.waitText("#session-heading", "no keys")
	b.waitText("#session-meta", "user carol")
	b.submit("#turn-text", "hi", "#turn-run")
	b.waitText("[data-testid=turn-status]", "completed")
	b.waitText("[data-testid=turn-answer]", "hello carol")
	b.nav("sessions")
	b.waitText("#sessions-list", "no keys")
	b.checkClean("loopback")
}

// TestElicitationAndCancel: an MCP tool's request for input appears as a form in the turn and
// the answer typed there reaches the tool; a running turn stops with Cancel.
func TestElicitationAndCancel(t *testing.T) {
	h := startHermes(t, func(req scripted.Request) scripted.Reply {
		switch {
		case lastUserIs(req, "book") && req.HasTool("desk_ask"):
			return scripted.Calls(scripted.Call("desk_ask", map[string]any{}))
		case lastUserIs(req, "wait"):
			return scripted.Reply{Text: "too late", Delay: 2 * time.Minute}
		case req.LastMessage().Role == "tool":
			return scripted.Text("Booked: " + req.LastMessage().Content)
		}
		return scripted.Text("ok")
	})
	srv := mcp.NewServer(&mcp.Implementation{Name: "desk", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "ask", Description: "Asks the user for the booking's name.", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{
				Message: "Whose name is the booking under? " + payload,
				RequestedSchema: map[string]any{"type": "object", "required": []string{"name"}, "properties": map[string]any{
					"name":  map[string]any{"type": "string", "title": "Name"},
					"seats": map[string]any{"type": "integer", "title": "Seats"},
				}},
			})
			if err != nil {
				return nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%s name=%v seats=%v", res.Action, res.Content["name"], res.Content["seats"])}}}, nil
		})
	mcpHTTP := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(func() {
		mcpHTTP.CloseClientConnections()
		mcpHTTP.Close()
	})
	ctx := as(opsKey)
	gw := mcpgatewayv1.NewMCPGatewayServiceClient(h.conn)
	if _, err := gw.AddServer(ctx, &mcpgatewayv1.AddServerRequest{Wait: true, Spec: &mcpgatewayv1.ServerSpec{
		Name: "desk", Elicitation: "ask", Transport: &mcpgatewayv1.ServerSpec_Http{Http: &mcpgatewayv1.HTTPTransport{Url: mcpHTTP.URL}},
	}}); err != nil {
		t.Fatal(err)
	}
	tools := toolsv1.NewToolServiceClient(h.conn)
	testenv.WaitFor(t, 30*time.Second, "the MCP tool in the registry", func() bool {
		_, err := tools.GetTool(ctx, &toolsv1.GetToolRequest{Name: "desk_ask"})
		return err == nil
	})

	b := newBrowser(t)
	b.open(h.base)
	b.signIn(aliceKey, "")
	b.submit("#session-title", "desk", "#session-create button[type=submit]")
	b.waitText("#session-heading", "desk")

	// The tool asks; the form answers.
	b.submit("#turn-text", "book a desk", "#turn-run")
	b.waitText("[data-testid=elicitation]", "Whose name is the booking under? <script>")
	b.setValue(`[data-testid=elicitation] input[name="name"]`, "Ada")
	b.setValue(`[data-testid=elicitation] input[name="seats"]`, "2")
	b.click(`[data-testid=elicitation] button[type=submit]`)
	b.waitText("[data-testid=turn-status]", "completed")
	b.waitText("[data-testid=turn-answer]", "accept name=Ada seats=2")
	b.checkClean("elicitation")

	// A turn that waits on the model stops with Cancel. The console ignores Run until the last
	// turn's stream has ended (its answer shows a moment before): wait for that first, or the
	// click is lost and "started" below matches the last turn's view.
	b.waitFor("the last turn's stream to end", `!document.getElementById('turn-run').disabled`)
	b.submit("#turn-text", "wait for it", "#turn-run")
	b.waitText("#turn-view", "started")
	b.click("#turn-cancel")
	b.waitText("[data-testid=turn-status]", "cancelled")
	b.waitText("#turns-list", "cancelled")
}
