package mcpgateway

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// HTTPHandler serves the endpoint over Streamable HTTP. Around the SDK's handler (which also
// refuses a non-loopback Host header on a loopback connection) it refuses foreign browser
// origins, caps the number of sessions, and adds the SSE retry field; streams are resumable
// from the bounded event store.
func (s *MCPServer) HTTPHandler() http.Handler {
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.server }, &mcp.StreamableHTTPOptions{
		SessionTimeout:      s.cfg.SessionTimeout,
		Logger:              s.log,
		EventStore:          s.events,
		MaxRequestBodyBytes: s.cfg.MaxBodyBytes,
	})
	origins := parseOrigins(s.cfg.AllowedOrigins)
	retry := []byte("retry: " + strconv.FormatInt(s.cfg.SSERetry.Milliseconds(), 10) + "\n")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("Origin"); o != "" && !originAllowed(o, origins) {
			s.log.Warn("MCP endpoint: request from a foreign origin refused", "origin", o, "remote", r.RemoteAddr)
			http.Error(w, fmt.Sprintf("origin %q is not allowed to use this MCP endpoint (allow it with --mcp-allowed-origins)", o), http.StatusForbidden)
			return
		}
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" && s.sessionCount() >= s.cfg.MaxSessions {
			w.Header().Set("Retry-After", "10")
			http.Error(w, fmt.Sprintf("this MCP endpoint has its maximum of %d sessions; try again later", s.cfg.MaxSessions), http.StatusServiceUnavailable)
			return
		}
		sdk.ServeHTTP(&retryWriter{ResponseWriter: w, retry: retry}, r)
	})
}

func (s *MCPServer) sessionCount() int {
	n := 0
	for range s.server.Sessions() {
		n++
	}
	return n
}

// parseOrigins reads the comma list of allowed origins into their normalized forms.
func parseOrigins(list string) map[string]bool {
	out := map[string]bool{}
	for _, o := range strings.Split(list, ",") {
		if n, ok := normalizeOrigin(strings.TrimSpace(o)); ok {
			out[n] = true
		}
	}
	return out
}

// normalizeOrigin returns scheme://host[:port] in lower case, without a default port.
func normalizeOrigin(o string) (string, bool) {
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return "", false
	}
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if (u.Scheme == "http" && port == "80") || (u.Scheme == "https" && port == "443") {
		port = ""
	}
	if port != "" {
		host = net.JoinHostPort(host, port)
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return strings.ToLower(u.Scheme) + "://" + host, true
}

// originAllowed: loopback origins (a page served from this machine) and configured ones. The
// rest, "null" included, are what a DNS rebinding attack or a foreign page sends.
func originAllowed(origin string, allowed map[string]bool) bool {
	n, ok := normalizeOrigin(origin)
	if !ok {
		return false
	}
	if allowed[n] {
		return true
	}
	u, _ := url.Parse(n)
	h := u.Hostname()
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// retryWriter puts the SSE retry field in the first event of an event stream, so a client that
// loses the stream knows how soon to reconnect (with Last-Event-ID, to resume).
type retryWriter struct {
	http.ResponseWriter
	retry   []byte
	written bool
}

func (w *retryWriter) Write(b []byte) (int, error) {
	if !w.written {
		w.written = true
		if strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
			if _, err := w.ResponseWriter.Write(w.retry); err != nil {
				return 0, err
			}
		}
	}
	return w.ResponseWriter.Write(b)
}

// Flush passes flushes on: every SSE event is flushed as it is written.
func (w *retryWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *retryWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
