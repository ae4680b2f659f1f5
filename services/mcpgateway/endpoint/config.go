package endpoint

import (
	"flag"
	"time"
)

// Config holds the settings of Hermes' own MCP endpoint that both `hermes serve
// --mcp-listen` and `hermes mcp serve` take. Every size a client can make the endpoint hold is
// bounded here.
type Config struct {
	// AllowedOrigins is a comma list of browser origins ("https://app.example.com") allowed to
	// call the Streamable HTTP endpoint besides loopback ones; a request with any other Origin
	// header is refused with 403 (DNS rebinding protection). Requests without Origin (every
	// non-browser client) are allowed.
	AllowedOrigins string
	// Catalog is a YAML or JSON file of resources, resource templates and prompts the endpoint
	// serves next to the tool service's tools; empty serves none.
	Catalog string
	// MaxSessions caps the concurrent MCP sessions; a new one beyond it gets 503.
	MaxSessions int
	// MaxSessionsPerCaller caps the concurrent sessions of one authenticated caller (one API key
	// acting for one user), so one user cannot take every session; a new one beyond gets 429.
	// Callers without keys (authentication off) share MaxSessions only.
	MaxSessionsPerCaller int
	// MaxBodyBytes caps one HTTP request body (one JSON-RPC message or batch).
	MaxBodyBytes int64
	// MaxResultBytes is the largest tool output passed on whole; longer output is cut to a
	// preview, and a tool with an output schema then answers isError (a cut structure cannot
	// match its schema).
	MaxResultBytes int
	// SessionTimeout closes a session idle for this long.
	SessionTimeout time.Duration
	// EventStoreBytes caps the SSE events kept for resumption, over all sessions.
	EventStoreBytes int
	// EventsPerStream caps the events kept per SSE stream.
	EventsPerStream int
	// EventMaxAge drops kept events older than this.
	EventMaxAge time.Duration
	// SSERetry is the reconnection delay suggested to clients with the SSE retry field.
	SSERetry time.Duration
	// ProgressInterval is how often a running tool call reports progress (to a client that
	// sent a progressToken) and a debug log message (to a client that asked for debug logs).
	ProgressInterval time.Duration
	// ElicitMissing asks the user, through MCP elicitation, for required arguments a call left
	// out, when the client supports elicitation and the arguments are simple values.
	ElicitMissing bool
	// UserKeys lets user API keys use the endpoint, each as its own user
	// (auth.MCPEndpointUsersMethod); by default only operators and services may, as with
	// ExecuteTool.
	UserKeys bool
}

// RegisterFlags registers the endpoint's settings with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.AllowedOrigins, "mcp-allowed-origins", "", `comma list of browser origins (for example "https://app.example.com") allowed to call the MCP endpoint besides loopback ones; requests with another Origin header get 403`)
	fs.StringVar(&c.Catalog, "mcp-catalog", "", "YAML or JSON file of resources, resource templates and prompts the MCP endpoint serves besides the tools; re-read when it changes")
	fs.IntVar(&c.MaxSessions, "mcpgateway.mcp-max-sessions", 1000, "most concurrent MCP sessions on the endpoint")
	fs.IntVar(&c.MaxSessionsPerCaller, "mcpgateway.mcp-max-sessions-per-caller", 64, "most concurrent MCP sessions of one API key acting for one user")
	fs.Int64Var(&c.MaxBodyBytes, "mcpgateway.mcp-max-body-bytes", 4<<20, "largest HTTP request body the MCP endpoint reads")
	fs.IntVar(&c.MaxResultBytes, "mcpgateway.mcp-max-result-bytes", 1<<20, "largest tool output the MCP endpoint passes on whole (capped by tools.max-response-bytes)")
	fs.DurationVar(&c.SessionTimeout, "mcpgateway.mcp-session-timeout", 30*time.Minute, "an MCP session idle this long is closed")
	fs.IntVar(&c.EventStoreBytes, "mcpgateway.mcp-event-store-bytes", 16<<20, "bytes of SSE events kept for clients to resume lost streams, over all sessions")
	fs.IntVar(&c.EventsPerStream, "mcpgateway.mcp-events-per-stream", 1000, "SSE events kept per stream for resumption")
	fs.DurationVar(&c.EventMaxAge, "mcpgateway.mcp-event-max-age", 10*time.Minute, "SSE events older than this cannot be resumed")
	fs.DurationVar(&c.SSERetry, "mcpgateway.mcp-sse-retry", 2*time.Second, "reconnection delay suggested to MCP clients in the SSE retry field")
	fs.DurationVar(&c.ProgressInterval, "mcpgateway.mcp-progress-interval", time.Second, "how often a running tool call sends progress and a debug log message to the MCP client (at least 10ms)")
	fs.BoolVar(&c.UserKeys, "mcpgateway.mcp-user-keys", false, "let user API keys use the MCP endpoint, each as its own user (by default only operator and service keys may: it runs any tool directly)")
	fs.BoolVar(&c.ElicitMissing, "mcpgateway.mcp-elicit-missing", true, "ask the MCP client's user for required arguments a call left out (when the client supports elicitation)")
}

// withDefaults fills zero values, so an Config built in code works. ElicitMissing keeps
// its value: false is a choice.
func (c Config) withDefaults() Config {
	var d Config
	d.RegisterFlags(flag.NewFlagSet("defaults", flag.ContinueOnError))
	if c.MaxSessions <= 0 {
		c.MaxSessions = d.MaxSessions
	}
	if c.MaxSessionsPerCaller <= 0 {
		c.MaxSessionsPerCaller = d.MaxSessionsPerCaller
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = d.MaxBodyBytes
	}
	if c.MaxResultBytes <= 0 {
		c.MaxResultBytes = d.MaxResultBytes
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = d.SessionTimeout
	}
	if c.EventStoreBytes <= 0 {
		c.EventStoreBytes = d.EventStoreBytes
	}
	if c.EventsPerStream <= 0 {
		c.EventsPerStream = d.EventsPerStream
	}
	if c.EventMaxAge <= 0 {
		c.EventMaxAge = d.EventMaxAge
	}
	if c.SSERetry <= 0 {
		c.SSERetry = d.SSERetry
	}
	if c.ProgressInterval <= 0 {
		c.ProgressInterval = d.ProgressInterval
	}
	// Each running call ticks at this interval: a floor keeps a typo from costing a CPU.
	c.ProgressInterval = max(c.ProgressInterval, 10*time.Millisecond)
	return c
}
