// Package console serves the web console: a small hand-written page (HTML, CSS and JavaScript
// embedded in the binary, no framework, no build step) that talks only to the HTTP/JSON API of
// the same listener, with the same API keys. It holds no data and no privilege of its own: every
// request it makes is an ordinary API call, authenticated and authorized like any other.
//
// The page is served with a strict Content-Security-Policy (scripts, styles and fetches only from
// this origin, no inline script or style, no framing, no form submissions) and renders every text
// that comes from users, models, tools or MCP servers as text, never as HTML.
package console

import (
	"bytes"
	"embed"
	"net/http"
	"path"
	"strings"
	"time"
)

// Prefix is where the console is served.
const Prefix = "/ui/"

//go:embed assets
var assets embed.FS

// contentSecurityPolicy is the policy of every console response. form-action 'none' keeps a form
// from ever being submitted as a navigation (which would put what was typed, an API key
// included, into a URL) if the script fails to load.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; " +
	"frame-ancestors 'none'"

// files are the console's assets by name and content type; nothing else is served.
var files = map[string]string{
	"index.html": "text/html; charset=utf-8",
	"app.js":     "text/javascript; charset=utf-8",
	"app.css":    "text/css; charset=utf-8",
}

// asset is a file of the console, read once.
type asset struct {
	ctype string
	body  []byte
}

// Handler serves the console under Prefix: the page at Prefix itself and its assets by name.
// Any other path under Prefix answers 404.
func Handler() http.Handler {
	loaded := make(map[string]asset, len(files))
	for name, ctype := range files {
		// Embedded at build time; a missing file would fail console_test.
		if b, err := assets.ReadFile("assets/" + name); err == nil {
			loaded[name] = asset{ctype: ctype, body: b}
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		// The assets are small and change with the binary; revalidating them is cheap and keeps
		// a browser from running an old script against a new API.
		h.Set("Cache-Control", "no-cache")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name := strings.TrimPrefix(path.Clean(r.URL.Path), strings.TrimSuffix(Prefix, "/"))
		name = strings.TrimPrefix(name, "/")
		if name == "" {
			name = "index.html"
		}
		a, ok := loaded[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		h.Set("Content-Type", a.ctype)
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
	})
}
