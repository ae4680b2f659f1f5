package endpoint

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hermes-agent/hermes/internal/browserguard"
	"github.com/hermes-agent/hermes/internal/config"
)

// HTTPHandler serves the endpoint over Streamable HTTP. Around the SDK's handler (which also
// refuses a non-loopback Host header on a loopback connection) the browser guard shared with the
// other HTTP listeners refuses foreign browser origins (loopback ones and --mcp-allowed-origins
// pass) and writes that are not JSON; the handler caps the number of sessions and adds the SSE
// retry field; streams are resumable from the bounded event store. Each request's Caller (put in
// its context with WithCaller by the listener's authentication) is bound to the session it
// starts, and a request of that session from another caller is refused (bindCaller).
func (s *Server) HTTPHandler() http.Handler {
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.server }, &mcp.StreamableHTTPOptions{
		SessionTimeout:      s.cfg.SessionTimeout,
		Logger:              s.log,
		EventStore:          s.events,
		MaxRequestBodyBytes: s.cfg.MaxBodyBytes,
	})
	bound := bindCaller(sdk)
	retry := []byte("retry: " + strconv.FormatInt(s.cfg.SSERetry.Milliseconds(), 10) + "\n")
	return s.guard.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := &retryWriter{ResponseWriter: w, retry: retry}
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
			// Callers without keys (authentication off) share the endpoint's cap only.
			key, perCaller := "anonymous", 0
			if c, ok := r.Context().Value(callerKey{}).(Caller); ok && c.Principal != "" && c.Principal != "anonymous" {
				key, perCaller = c.sessionKey(), s.cfg.MaxSessionsPerCaller
			}
			release, why := s.owners.reserve(key, s.server, perCaller, s.cfg.MaxSessions)
			switch why {
			case endpointIsFull:
				w.Header().Set("Retry-After", "10")
				http.Error(w, fmt.Sprintf("this MCP endpoint has its maximum of %d sessions; try again later", s.cfg.MaxSessions), http.StatusServiceUnavailable)
				return
			case callerIsFull:
				w.Header().Set("Retry-After", "10")
				http.Error(w, fmt.Sprintf("this API key has its maximum of %d MCP sessions; close one (DELETE) or try again later", s.cfg.MaxSessionsPerCaller), http.StatusTooManyRequests)
				return
			}
			// The place is held until the response's header is written, which carries the new
			// session's id (none: no session was made), and is then the session's; at the
			// latest when the request ends. Not only at its end: the client's next request may
			// come as soon as it has the answer.
			rw.started = func(h http.Header) { release(h.Get("Mcp-Session-Id")) }
			defer rw.start()
		}
		bound.ServeHTTP(rw, r)
	}))
}

// newGuard is the endpoint's browser guard: pages of loopback origins (local MCP clients such
// as the MCP Inspector) and of the configured origins may call it; the SDK checks the Host.
func newGuard(cfg Config, log *slog.Logger) (*browserguard.Guard, error) {
	g, err := browserguard.New(browserguard.Config{
		AllowedOrigins:       config.SplitList(cfg.AllowedOrigins),
		AllowLoopbackOrigins: true,
		SkipHostCheck:        true,
		OriginsSetting:       "--mcp-allowed-origins",
		CORSHeaders:          []string{"Mcp-Session-Id", "Mcp-Protocol-Version", "Last-Event-ID"},
		ExposeHeaders:        []string{"Mcp-Session-Id"},
		Logger:               log,
	})
	if err != nil {
		return nil, fmt.Errorf("--mcp-allowed-origins: %w", err)
	}
	return g, nil
}

func (s *Server) sessionCount() int {
	n := 0
	for range s.server.Sessions() {
		n++
	}
	return n
}

// retryWriter puts the SSE retry field in the first event of an event stream, so a client that
// loses the stream knows how soon to reconnect (with Last-Event-ID, to resume).
type retryWriter struct {
	http.ResponseWriter
	retry   []byte
	written bool
	// started, when set, sees the response's header once, as it is sent or when the handler
	// returns without sending one (the new session's id, for the per-caller count).
	started func(http.Header)
}

func (w *retryWriter) start() {
	if w.started != nil {
		f := w.started
		w.started = nil
		f(w.Header())
	}
}

func (w *retryWriter) WriteHeader(code int) {
	w.start()
	w.ResponseWriter.WriteHeader(code)
}

func (w *retryWriter) Write(b []byte) (int, error) {
	w.start()
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
	w.start()
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *retryWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
