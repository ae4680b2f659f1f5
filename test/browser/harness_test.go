// Package browser tests the web console (internal/console) in a real headless Chromium driven
// through the DevTools protocol (chromedp), against a real Hermes served in the process with
// API keys, its HTTP listener and the scripted model.
//
// Chromium is Debian's `chromium` (scripts/ensure-backends.sh installs it; HERMES_CHROMIUM names
// another binary). Without it the tests skip, except in CI (CI=true), where they fail.
package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/hermes-agent/hermes/app"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	"github.com/hermes-agent/hermes/test/hermestest"
)

// The principals of the auth file.
const (
	aliceKey = "sk-alice-console-0123456789"
	bobKey   = "sk-bob-console-0123456789ab"
	opsKey   = "sk-ops-console-0123456789ab"
)

const authFile = aliceKey + ": alice\n" +
	bobKey + ": bob\n" +
	opsKey + ": {role: operator, name: ops}\n"

// hermes is a served Hermes: every service in one process with embedded stores, API keys and
// the HTTP listener.
type hermes struct {
	app   *app.App
	model *scripted.Server
	conn  *grpc.ClientConn
	// base is the HTTP listener's URL, for example http://127.0.0.1:41234.
	base string
}

// startHermes serves Hermes with API keys and model as its model (the memory extractor's
// requests get no memories).
func startHermes(t *testing.T, model scripted.Handler) *hermes {
	t.Helper()
	return serveHermes(t, model, true)
}

// serveHermes serves Hermes, with the auth file when keys is set and on loopback without keys
// otherwise.
func serveHermes(t *testing.T, model scripted.Handler, keys bool) *hermes {
	t.Helper()
	dir := t.TempDir()
	hs := hermestest.Start(t, hermestest.Options{
		Model: model, DataDir: dir, Log: slog.New(slog.DiscardHandler),
		// The tools and MCP servers of these tests listen on loopback; the operator allows it.
		Args: []string{hermestest.AllowLoopback, "--http-listen=127.0.0.1:0"},
		Configure: func(cfg *app.Config) {
			if keys {
				cfg.AuthFile = filepath.Join(dir, "keys.yaml")
				if err := os.WriteFile(cfg.AuthFile, []byte(authFile), 0o600); err != nil {
					t.Fatal(err)
				}
			}
		},
	})
	return &hermes{app: hs.App, model: hs.Model, conn: hs.Conn, base: "http://" + hs.App.HTTPAddr()}
}

// as returns a context carrying key as a bearer credential.
func as(key string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)
}

// getJSON calls a GET route of the HTTP API with key and decodes the answer into out.
func (h *hermes) getJSON(t *testing.T, key, path string, out any) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, h.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode
}

// chromium finds the browser, or skips the test where none is installed, except in CI.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("HERMES_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is required in CI (scripts/ensure-backends.sh installs it)")
	}
	t.Skip("chromium is not installed (apt-get install chromium); the browser tests need it")
	return ""
}

// browser is one headless Chromium tab, with what the page did that it should not have:
// dialogs it opened and Content-Security-Policy violations it reported.
type browser struct {
	t *testing.T
	// ctx is the tab's context; each action runs under a deadline derived from it (a deadline
	// on the context of the first call would bound the whole browser).
	ctx context.Context

	mu sync.Mutex
	// dialogs are the messages of alert, confirm and prompt dialogs, guarded by mu.
	dialogs []string
}

// actionTimeout bounds one browser action or wait: generous, for a loaded 2-core machine.
const actionTimeout = 90 * time.Second

// watchScript runs in every document before the page's own scripts: it records CSP violations
// in a global that the tests read, and sets the flag that hostile payloads would set.
const watchScript = `window.__pwned = 0; window.__csp = [];
document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));`

func newBrowser(t *testing.T) *browser {
	t.Helper()
	path := chromium(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	b := &browser{t: t, ctx: ctx}
	// Starts the browser, without a deadline.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	// Dialogs are recorded and dismissed, so a payload's alert cannot block the page.
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.dialogs = append(b.dialogs, ev.Message)
			b.mu.Unlock()
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	b.run(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: watchScript})
		return err
	}))
	return b
}

// run runs actions in the tab and fails the test on error.
func (b *browser) run(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("browser: %v", err)
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("browser: evaluate %s: %v", expr, err)
	}
	return v
}

// js quotes s as a JavaScript string literal.
func js(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}

// waitFor polls the page until the JavaScript expression is true.
func (b *browser) waitFor(what, expr string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(actionTimeout-5*time.Second)))
	if err != nil {
		errText := eval[string](b, `document.getElementById('error') ? document.getElementById('error').textContent : ''`)
		body := eval[string](b, `document.querySelector('main') ? document.querySelector('main').innerText.slice(0, 3000) : ''`)
		b.t.Fatalf("waiting for %s: %v\nerror bar: %q\npage: %s", what, err, errText, body)
	}
}

// waitText waits until the element of selector contains text.
func (b *browser) waitText(selector, text string) {
	b.t.Helper()
	b.waitFor(fmt.Sprintf("%q in %s", text, selector),
		fmt.Sprintf(`(() => { const e = document.querySelector(%s); return !!e && e.textContent.includes(%s); })()`, js(selector), js(text)))
}

// text is the text of the first element matching selector ("" when there is none).
func (b *browser) text(selector string) string {
	b.t.Helper()
	return eval[string](b, fmt.Sprintf(`(() => { const e = document.querySelector(%s); return e ? e.textContent : ''; })()`, js(selector)))
}

// open loads the console and waits for its script to be ready.
func (b *browser) open(base string) {
	b.t.Helper()
	b.run(chromedp.Navigate(base + "/ui/"))
	b.waitFor("the console's script", `!!document.body && document.body.dataset.ready === '1'`)
}

// signIn signs in with key (and user, for operator keys) and waits for the signed-in console.
func (b *browser) signIn(key, user string) {
	b.t.Helper()
	b.waitFor("the sign-in form", `!document.getElementById('view-signin').hidden`)
	b.setValue("#signin-key", key)
	b.setValue("#signin-user", user)
	b.click("#signin-submit")
	b.waitFor("the signed-in console", `!document.getElementById('nav').hidden && document.getElementById('view-signin').hidden`)
}

// signOut signs out and waits for the sign-in form.
func (b *browser) signOut() {
	b.t.Helper()
	b.run(chromedp.Click(chromedp.ID("signout")))
	b.waitFor("the sign-in form", `!document.getElementById('view-signin').hidden`)
}

// click clicks the first element matching a CSS selector.
func (b *browser) click(selector string) {
	b.t.Helper()
	b.run(chromedp.Click(chromedp.CSS(selector)))
}

// setValue sets the value of a form field, as typing would.
func (b *browser) setValue(selector, value string) {
	b.t.Helper()
	eval[bool](b, fmt.Sprintf(`(() => { const e = document.querySelector(%s); e.value = %s; e.dispatchEvent(new Event('input', {bubbles: true})); return true; })()`, js(selector), js(value)))
}

// submit sets the value of input and submits its form with the button.
func (b *browser) submit(input, value, button string) {
	b.t.Helper()
	b.setValue(input, value)
	b.click(button)
}

// nav switches to a top-level view.
func (b *browser) nav(view string) {
	b.t.Helper()
	b.click(`#nav button[data-view="` + view + `"]`)
	b.waitFor("the "+view+" view", fmt.Sprintf(`!document.getElementById(%s).hidden`, js("view-"+view)))
}

// checkClean fails the test when the page ran anything it should not have: a payload's flag,
// a dialog, a CSP violation, or an element that only HTML from data would have made.
func (b *browser) checkClean(where string) {
	b.t.Helper()
	pwned := eval[int](b, `window.__pwned`)
	csp := eval[[]string](b, `window.__csp`)
	elements := eval[[]string](b, `Array.from(document.querySelectorAll('main img, main script, main svg, main iframe, main object, main embed, main a, main [onerror], main [onload], main [onclick], main [href], main [src]')).map((e) => e.outerHTML.slice(0, 200))`)
	b.mu.Lock()
	dialogs := append([]string(nil), b.dialogs...)
	b.mu.Unlock()
	if pwned != 0 || len(csp) != 0 || len(elements) != 0 || len(dialogs) != 0 {
		b.t.Errorf("%s: the page ran or built what data put in it: flag %d, CSP violations %q, elements %q, dialogs %q", where, pwned, csp, elements, dialogs)
	}
}

// screenshot writes the page to docs/console.png when HERMES_UPDATE_SCREENSHOT=1.
func (b *browser) screenshot() {
	b.t.Helper()
	if os.Getenv("HERMES_UPDATE_SCREENSHOT") != "1" {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	out := filepath.Join("..", "..", "docs", "console.png")
	if err := os.WriteFile(out, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("wrote %s (%d bytes)", out, len(png))
}

// lastUserIs reports whether the request's last message is the user's and contains s.
func lastUserIs(req scripted.Request, s string) bool {
	return req.LastMessage().Role == "user" && strings.Contains(req.LastUser(), s)
}
