// Package browserguard keeps web pages from using Hermes' HTTP listeners through a browser. A
// page the operator opens can send requests to any address its browser reaches — loopback
// included — and a "simple" request (GET, or a POST of text/plain or a form) leaves without the
// browser asking the server first. Without keys (loopback) such a request acts with every
// right; with DNS rebinding (a name of the attacker's that resolves to 127.0.0.1) the page can
// even read the answers. The guard refuses what only a browser on a foreign page sends:
//
//   - a Host header that is not a loopback name, an IP address or a configured name (DNS
//     rebinding: the browser sends the attacker's name);
//   - an Origin header of another origin than the request's own, unless configured (clients
//     other than browsers send none);
//   - a write (POST, PUT, PATCH, or DELETE with a body) whose Content-Type is not
//     application/json: a page can send JSON to another origin only after a CORS preflight,
//     which the guard answers for configured origins only.
//
// Refusals are 403 with a JSON google.rpc.Status body that names the setting to change. The
// HTTP/JSON API, the profiler, the metrics listener and the MCP endpoint share this one guard.
package browserguard

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Config configures a Guard. The zero value guards a loopback listener: loopback names and IP
// addresses as Host, same-origin pages only, no CORS.
type Config struct {
	// AllowedHosts are the names (besides loopback names and IP addresses) clients use to reach
	// the listener: "hermes.example.com" (any port), "hermes.example.com:8443" (that port),
	// "*.example.com" (its subdomains), "*" (any Host: the check is off, for a proxy that checks
	// it).
	AllowedHosts []string
	// AllowedOrigins are browser origins ("https://app.example.com") besides the listener's own
	// that may call it; they get CORS answers.
	AllowedOrigins []string
	// AllowLoopbackOrigins also lets pages served from a loopback origin call the listener
	// (without CORS answers). The MCP endpoint allows them for local MCP clients (the MCP
	// Inspector runs at http://localhost:6274).
	AllowLoopbackOrigins bool
	// SkipHostCheck leaves the Host header to the handler (the MCP SDK checks it itself).
	SkipHostCheck bool
	// WriteTypes are media types a write may carry besides application/json: only types a page
	// cannot send without a preflight (the profiler takes go tool pprof's
	// application/octet-stream symbol lookups). text/plain and the form types are refused here.
	WriteTypes []string
	// HostsSetting and OriginsSetting name the settings in refusals, for example
	// "--http-allowed-hosts (HERMES_HTTP_ALLOWED_HOSTS)".
	HostsSetting, OriginsSetting string
	// CORSHeaders are the request headers a configured origin may send besides Authorization,
	// Content-Type and X-Api-Key; ExposeHeaders the response headers its pages may read.
	CORSHeaders, ExposeHeaders []string
	// Logger receives one line per refusal; nil discards.
	Logger *slog.Logger
}

// Guard checks requests against a Config. It holds no mutable state.
type Guard struct {
	cfg Config
	// hosts are the configured names, lower case; a leading "*." matches subdomains.
	hosts   []hostRule
	anyHost bool
	// origins are the configured origins, normalized.
	origins map[string]bool
	log     *slog.Logger
}

type hostRule struct {
	name string // lower case, without a trailing dot; "*.example.com" matches subdomains
	port string // "" for any port
}

// New checks cfg and returns its Guard. An entry that is not a host name (a URL, a path) or not
// an origin (a path, "null", credentials) is an error, so a mistyped setting fails at start.
func New(cfg Config) (*Guard, error) {
	g := &Guard{cfg: cfg, origins: map[string]bool{}, log: cfg.Logger}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.cfg.HostsSetting == "" {
		g.cfg.HostsSetting = "the allowed hosts"
	}
	if g.cfg.OriginsSetting == "" {
		g.cfg.OriginsSetting = "the allowed origins"
	}
	for _, h := range cfg.AllowedHosts {
		h = strings.TrimSpace(h)
		if h == "*" {
			g.anyHost = true
			continue
		}
		r, ok := parseHostRule(h)
		if !ok {
			return nil, fmt.Errorf("allowed host %q: want a host name, optionally with a port (hermes.example.com, hermes.example.com:8443, *.example.com), or *", h)
		}
		g.hosts = append(g.hosts, r)
	}
	for _, t := range cfg.WriteTypes {
		if simpleContentType(t) {
			return nil, fmt.Errorf("write type %q: a page can send it without a preflight", t)
		}
	}
	for _, o := range cfg.AllowedOrigins {
		n, ok := normalizeOrigin(strings.TrimSpace(o))
		if !ok {
			return nil, fmt.Errorf("allowed origin %q: want scheme://host[:port] with scheme http or https (https://app.example.com)", o)
		}
		g.origins[n] = true
	}
	return g, nil
}

func parseHostRule(s string) (hostRule, bool) {
	if s == "" || strings.ContainsAny(s, "/?#@ ") {
		return hostRule{}, false
	}
	host, port := splitHost(s)
	if host == "" {
		return hostRule{}, false
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return hostRule{}, false
		}
	}
	rest := strings.TrimPrefix(host, "*.")
	if rest == "" || strings.Contains(rest, "*") {
		return hostRule{}, false
	}
	return hostRule{name: host, port: port}, true
}

// splitHost splits a Host header or a host rule into its lower-case name, without brackets or
// a trailing dot, and its port ("" when absent).
func splitHost(hostport string) (host, port string) {
	host = hostport
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		host, port = h, p
	} else if strings.HasPrefix(hostport, "[") && strings.HasSuffix(hostport, "]") {
		host = hostport[1 : len(hostport)-1]
	}
	return strings.TrimSuffix(strings.ToLower(host), "."), port
}

// isLoopbackName: localhost and its subdomains (RFC 6761: browsers resolve them to loopback
// themselves, so no rebinding can use them).
func isLoopbackName(host string) bool {
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
}

// HostAllowed reports whether a Host header names this server: a loopback name, an IP address
// (a page can rebind only a name it controls; a page served from an IP address is a different
// origin, which the Origin check refuses), or a configured name. An empty Host (HTTP/1.0) comes
// from no browser.
func (g *Guard) HostAllowed(hostHeader string) bool {
	if g.anyHost || hostHeader == "" {
		return true
	}
	host, port := splitHost(hostHeader)
	if host == "" {
		return false
	}
	if isLoopbackName(host) || net.ParseIP(host) != nil {
		return true
	}
	for _, r := range g.hosts {
		if r.port != "" && r.port != port {
			continue
		}
		if sub, ok := strings.CutPrefix(r.name, "*."); ok {
			if strings.HasSuffix(host, "."+sub) {
				return true
			}
		} else if host == r.name {
			return true
		}
	}
	return false
}

// OriginAllowed reports whether a request with this Origin header may be served, and whether it
// is a configured origin (which gets CORS answers). Absent: a client other than a browser, or a
// same-origin GET. Otherwise the origin must be the request's own (its Host, with the origin's
// scheme's default port when the Host has none), a configured one, or with
// AllowLoopbackOrigins a loopback one. "null" (sandboxed pages, file://) is refused.
func (g *Guard) OriginAllowed(origin, hostHeader string) (ok, configured bool) {
	if origin == "" {
		return true, false
	}
	n, valid := normalizeOrigin(origin)
	if !valid {
		return false, false
	}
	if g.origins[n] {
		return true, true
	}
	u, _ := url.Parse(n)
	oHost, oPort := strings.ToLower(u.Hostname()), u.Port()
	if oPort == "" {
		oPort = defaultPort(u.Scheme)
	}
	if hostHeader != "" {
		h, p := splitHost(hostHeader)
		if p == "" {
			p = defaultPort(u.Scheme)
		}
		if h == strings.TrimSuffix(oHost, ".") && p == oPort {
			return true, false
		}
	}
	if g.cfg.AllowLoopbackOrigins {
		if isLoopbackName(oHost) {
			return true, false
		}
		if ip := net.ParseIP(oHost); ip != nil && ip.IsLoopback() {
			return true, false
		}
	}
	return false, false
}

func defaultPort(scheme string) string {
	if scheme == "https" {
		return "443"
	}
	return "80"
}

// normalizeOrigin returns scheme://host[:port] in lower case without a default port, or false
// for what is not an http or https origin ("null", a path, credentials).
func normalizeOrigin(o string) (string, bool) {
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", false
	}
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if host == "" {
		return "", false
	}
	if port == defaultPort(u.Scheme) {
		port = ""
	}
	if port != "" {
		host = net.JoinHostPort(host, port)
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return u.Scheme + "://" + host, true
}

// writeMethod reports a request that changes something and could carry a body a page chose.
// DELETE without a body needs no content type: a browser asks before sending one (preflight).
func writeMethod(r *http.Request) bool {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
		return true
	case http.MethodDelete:
		return r.ContentLength != 0
	}
	return false
}

// writeTypeAllowed reports application/json or a configured type, with any parameters
// (charset).
func (g *Guard) writeTypeAllowed(v string) bool {
	mt, _, err := mime.ParseMediaType(v)
	return err == nil && (mt == "application/json" || slices.Contains(g.cfg.WriteTypes, mt))
}

// simpleContentType reports the types a page may send to another origin without a preflight
// (the Fetch standard's CORS-safelisted request header values of Content-Type).
func simpleContentType(v string) bool {
	mt, _, err := mime.ParseMediaType(v)
	return err != nil || mt == "text/plain" || mt == "application/x-www-form-urlencoded" || mt == "multipart/form-data"
}

// Refusal is why a request was refused; its message says what to configure.
type Refusal struct{ Message string }

// Check returns nil for a request the guard lets through, or why it refuses it.
func (g *Guard) Check(r *http.Request) *Refusal {
	if !g.cfg.SkipHostCheck && !g.HostAllowed(r.Host) {
		return &Refusal{fmt.Sprintf("the Host header %q is not a name this server answers to: a web page that made its own name "+
			"point at this server (DNS rebinding) sends such requests. If clients reach the server by this name, add it to %s",
			r.Host, g.cfg.HostsSetting)}
	}
	origin := r.Header.Get("Origin")
	if ok, _ := g.OriginAllowed(origin, r.Host); !ok {
		return &Refusal{fmt.Sprintf("a web page of origin %q may not call this server (browsers send the page's origin; other clients send none). "+
			"To let pages of that origin call it, add the origin to %s", origin, g.cfg.OriginsSetting)}
	}
	if writeMethod(r) && !g.writeTypeAllowed(r.Header.Get("Content-Type")) {
		ct := r.Header.Get("Content-Type")
		if ct == "" {
			ct = "none"
		}
		return &Refusal{fmt.Sprintf("a %s must be sent with \"Content-Type: application/json\" (got %s): a web page can send other types "+
			"to any server without the browser asking it first", r.Method, ct)}
	}
	return nil
}

// Wrap serves next behind the guard: refused requests get 403 with a JSON body; requests of a
// configured origin get CORS headers and their preflights an answer.
func (g *Guard) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if len(g.origins) > 0 && origin != "" {
			// Caches must not serve one origin's answer to another.
			w.Header().Add("Vary", "Origin")
		}
		if ref := g.Check(r); ref != nil {
			g.log.Warn("request from a browser context refused", "method", r.Method, "path", r.URL.Path,
				"host", r.Host, "origin", origin, "remote", r.RemoteAddr, "reason", ref.Message)
			refuse(w, ref.Message)
			return
		}
		if _, configured := g.OriginAllowed(origin, r.Host); configured {
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", origin)
			if len(g.cfg.ExposeHeaders) > 0 {
				h.Set("Access-Control-Expose-Headers", strings.Join(g.cfg.ExposeHeaders, ", "))
			}
			if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
				h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE")
				h.Set("Access-Control-Allow-Headers", strings.Join(slices.Concat([]string{"Authorization", "Content-Type", "X-Api-Key"}, g.cfg.CORSHeaders), ", "))
				h.Set("Access-Control-Max-Age", "600")
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// refuse answers 403 with msg in a google.rpc.Status body (code 7, PERMISSION_DENIED), the
// error format of the HTTP/JSON API.
func refuse(w http.ResponseWriter, msg string) {
	body, _ := json.Marshal(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Details []any  `json:"details"`
	}{7, msg, []any{}})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusForbidden)
	_, _ = w.Write(append(body, '\n'))
}
