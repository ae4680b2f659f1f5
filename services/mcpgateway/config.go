package mcpgateway

import (
	"flag"
	"time"

	"github.com/hermes-agent/hermes/internal/config"
	"github.com/hermes-agent/hermes/services/mcpgateway/endpoint"
)

// Config holds the mcpgateway service's settings; each is a flag with an environment variable
// and a YAML key (see internal/config). The MCP endpoint and the servers file have short names
// (HERMES_MCP_LISTEN, HERMES_MCP_SERVERS); the rest live under "mcpgateway.".
type Config struct {
	// StdioAllow lists the commands stdio MCP servers may run (exactly as a spec's command
	// names them): running a command is the operator's decision, so AddServer and specs read
	// back from the store may use only these; the servers file given at start is operator
	// configuration and may define its own.
	StdioAllow []string
	// MCPListen is the HTTP address where Hermes' own tools are served over Streamable HTTP;
	// empty serves none.
	MCPListen string
	// MCPPath is the HTTP path of that endpoint.
	MCPPath string
	// ServersFile is a JSON file in the mcpServers format of desktop MCP clients.
	ServersFile string
	// CallTimeout is a tool call's timeout when a server sets none.
	CallTimeout time.Duration
	// ConnectTimeout bounds one connection attempt (process start, handshake, tool listing).
	ConnectTimeout time.Duration
	// RunnerStartTimeout replaces ConnectTimeout for the handshake of a stdio server started
	// through a package runner (npx, uvx, …) until it has connected once: the first start may
	// download the package.
	RunnerStartTimeout time.Duration
	// PingInterval is how often a connected server is pinged; 0 disables pings.
	PingInterval time.Duration
	// PingTimeout bounds one ping, and the probe made after a failed call.
	PingTimeout time.Duration
	// ElicitTimeout is how long a server's request for user input, or for a completion by the
	// caller's model (sampling.ask_caller), waits for an answer.
	ElicitTimeout time.Duration
	// ReconnectMin and ReconnectMax bound the backoff between connection attempts.
	ReconnectMin, ReconnectMax time.Duration
	// HTTPReconnectMax caps the backoff of Streamable HTTP servers below ReconnectMax: probing
	// one is a single HTTP request, so a server that comes back is reconnected within this,
	// even when no call arrives to trigger a reconnect.
	HTTPReconnectMax time.Duration
	// ListDebounce delays the re-listing after notifications/tools/list_changed, so a burst of
	// notifications causes one listing.
	ListDebounce time.Duration
	// MaxTextBytes caps text from resources, prompts and tool results.
	MaxTextBytes int
	// CompactJSONOver compacts JSON text longer than this many bytes.
	CompactJSONOver int
	// MaxMediaItemBytes caps the bytes of one image, audio clip or binary resource of a tool
	// result that are passed on (to MCP clients of Hermes, and to models that take images);
	// a larger block is described instead, with its size and this cap.
	MaxMediaItemBytes int
	// MaxMediaBytes caps the media bytes passed on from one tool result.
	MaxMediaBytes int
	// MaxServers caps the number of servers.
	MaxServers int
	// PruneStale unregisters, once the tool service answers, MCP tools left in it by servers the
	// gateway no longer has (after a restart).
	PruneStale bool
	// ToolsRefresh is how often Hermes' MCP endpoint re-reads the tool service's tools.
	ToolsRefresh time.Duration
	// StopGrace is how long a stdio server may take to exit after its stdin closes, before it is
	// sent SIGTERM (and after that, SIGKILL).
	StopGrace time.Duration
	// SyncInterval is how often a replica re-reads the shared server store.
	SyncInterval time.Duration
	// Endpoint configures Hermes' own MCP endpoint (on MCPListen).
	Endpoint endpoint.Config
	// ReadyWait is how long a call waits for a server that is (re)connecting, at most half the
	// call's timeout; a call to a failed server also starts a reconnect attempt at once.
	ReadyWait time.Duration
	// OAuthRedirectURL is the redirect URI of per-user OAuth: Hermes' HTTP listener's
	// /v1/mcp/oauth/callback as the user's browser reaches it.
	OAuthRedirectURL string
	// OAuthClientMetadataURL is the HTTPS URL of the operator's Client ID Metadata Document:
	// per-user OAuth uses it as the client id with authorization servers that support such
	// documents, instead of registering a client.
	OAuthClientMetadataURL string
	// OAuthKeyFile holds the key that seals the users' tokens (ParseOAuthKey).
	OAuthKeyFile string
}

// RegisterFlags registers the settings with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Func("mcpgateway.stdio-allow", "comma list of commands stdio MCP servers may run (for example npx,uvx); none by default, except what the --mcp-servers file itself defines", func(v string) error {
		c.StdioAllow = config.SplitList(v)
		return nil
	})
	fs.StringVar(&c.MCPListen, "mcp-listen", "", "HTTP address serving Hermes' tools over MCP Streamable HTTP (for example 127.0.0.1:7071); empty disables it")
	fs.StringVar(&c.MCPPath, "mcpgateway.mcp-path", "/mcp", "HTTP path of the MCP endpoint on --mcp-listen")
	fs.StringVar(&c.ServersFile, "mcp-servers", "", `JSON file of MCP servers to connect at start, in the "mcpServers" format desktop MCP clients use`)
	fs.DurationVar(&c.CallTimeout, "mcpgateway.call-timeout", 30*time.Second, "timeout of one MCP tool call when the server sets none")
	fs.DurationVar(&c.ConnectTimeout, "mcpgateway.connect-timeout", 30*time.Second, "timeout of one connection attempt to an MCP server (start, handshake, tool listing)")
	fs.DurationVar(&c.RunnerStartTimeout, "mcpgateway.runner-start-timeout", 5*time.Minute, "timeout of the first connection to a stdio MCP server started through a package runner (npx, uvx, bunx, pnpm dlx, pipx run), which may download the package first; later attempts use --mcpgateway.connect-timeout")
	fs.DurationVar(&c.PingInterval, "mcpgateway.ping-interval", 15*time.Second, "how often connected MCP servers are pinged to find hung ones; 0 disables")
	fs.DurationVar(&c.PingTimeout, "mcpgateway.ping-timeout", 5*time.Second, "timeout of one ping to an MCP server")
	fs.DurationVar(&c.ElicitTimeout, "mcpgateway.elicit-timeout", time.Minute, "how long a server's request for user input (elicitation \"ask\" mode), or for a completion by the caller's model (sampling askCaller), waits for the answer before it is declined")
	fs.DurationVar(&c.ReconnectMin, "mcpgateway.reconnect-min", 500*time.Millisecond, "first delay before reconnecting to a failed MCP server")
	fs.DurationVar(&c.ReconnectMax, "mcpgateway.reconnect-max", 30*time.Second, "longest delay between reconnection attempts")
	fs.DurationVar(&c.HTTPReconnectMax, "mcpgateway.http-reconnect-max", 5*time.Second, "longest delay between reconnection attempts to a Streamable HTTP MCP server (at most --mcpgateway.reconnect-max): a recovered server is found within it without waiting for a call")
	fs.DurationVar(&c.ListDebounce, "mcpgateway.list-debounce", 300*time.Millisecond, "delay before re-listing tools after a list_changed notification")
	fs.IntVar(&c.MaxTextBytes, "mcpgateway.max-text-bytes", 64<<10, "cap on text from MCP resources, prompts and tool results, in bytes")
	fs.IntVar(&c.MaxMediaItemBytes, "mcpgateway.max-media-item-bytes", 2<<20, "cap on the bytes of one image, audio clip or binary resource of an MCP tool result that are passed on; larger ones are described instead")
	fs.IntVar(&c.MaxMediaBytes, "mcpgateway.max-media-bytes", 4<<20, "cap on the media bytes passed on from one MCP tool result")
	fs.IntVar(&c.CompactJSONOver, "mcpgateway.compact-json-over", 1024, "compact JSON text longer than this many bytes")
	fs.IntVar(&c.MaxServers, "mcpgateway.max-servers", 256, "maximum number of MCP servers")
	fs.BoolVar(&c.PruneStale, "mcpgateway.prune-stale", true, "unregister MCP tools left in the tool service by servers the gateway no longer has")
	fs.DurationVar(&c.ToolsRefresh, "mcpgateway.tools-refresh", 5*time.Second, "how often the MCP endpoint re-reads the tool service's tools")
	fs.DurationVar(&c.StopGrace, "mcpgateway.stop-grace", 2*time.Second, "how long a stdio MCP server may take to exit before it is signalled")
	fs.DurationVar(&c.ReadyWait, "mcpgateway.ready-wait", 3*time.Second, "how long a call waits for an MCP server that is reconnecting (a call to a failed server triggers a reconnect at once); 0 fails such calls at once")
	fs.DurationVar(&c.SyncInterval, "mcpgateway.sync-interval", 2*time.Second, "how often a gateway re-reads the stored servers that AddServer added (all replicas connect to them)")
	fs.StringVar(&c.OAuthRedirectURL, "mcpgateway.oauth-redirect-url", "", "redirect URI of per-user OAuth for MCP servers (servers with user_oauth): the /v1/mcp/oauth/callback route of --http-listen as users' browsers reach it, for example https://hermes.example.com/v1/mcp/oauth/callback")
	fs.StringVar(&c.OAuthClientMetadataURL, "mcpgateway.oauth-client-metadata-url", "", "public HTTPS URL of Hermes' OAuth Client ID Metadata Document (MCP 2025-11-25): used as the client id of per-user OAuth with authorization servers whose metadata has client_id_metadata_document_supported, instead of dynamic client registration. Publish the document there (hermes serves it at /v1/mcp/oauth/client-metadata.json); empty registers dynamically")
	fs.StringVar(&c.OAuthKeyFile, "mcpgateway.oauth-key-file", "", "file of the key (at least 32 characters; openssl rand -hex 32) that encrypts the users' OAuth tokens of MCP servers with user_oauth, the same on every gateway replica; without it those servers cannot be called")
	c.Endpoint.RegisterFlags(fs)
}

// withDefaults fills zero values, so a Config built in code (tests, the CLI) works.
func (c Config) withDefaults() Config {
	d := Config{}
	fs := flag.NewFlagSet("defaults", flag.ContinueOnError)
	d.RegisterFlags(fs)
	if c.MCPPath == "" {
		c.MCPPath = d.MCPPath
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = d.CallTimeout
	}
	if c.ElicitTimeout <= 0 {
		c.ElicitTimeout = d.ElicitTimeout
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = d.ConnectTimeout
	}
	if c.RunnerStartTimeout <= 0 {
		c.RunnerStartTimeout = d.RunnerStartTimeout
	}
	if c.PingTimeout <= 0 {
		c.PingTimeout = d.PingTimeout
	}
	if c.ReconnectMin <= 0 {
		c.ReconnectMin = d.ReconnectMin
	}
	if c.ReconnectMax < c.ReconnectMin {
		c.ReconnectMax = max(d.ReconnectMax, c.ReconnectMin)
	}
	if c.HTTPReconnectMax <= 0 {
		c.HTTPReconnectMax = d.HTTPReconnectMax
	}
	c.HTTPReconnectMax = min(max(c.HTTPReconnectMax, c.ReconnectMin), c.ReconnectMax)
	if c.ListDebounce <= 0 {
		c.ListDebounce = d.ListDebounce
	}
	if c.MaxTextBytes <= 0 {
		c.MaxTextBytes = d.MaxTextBytes
	}
	if c.MaxMediaItemBytes <= 0 {
		c.MaxMediaItemBytes = d.MaxMediaItemBytes
	}
	if c.MaxMediaBytes <= 0 {
		c.MaxMediaBytes = d.MaxMediaBytes
	}
	if c.CompactJSONOver == 0 {
		c.CompactJSONOver = d.CompactJSONOver
	}
	if c.MaxServers <= 0 {
		c.MaxServers = d.MaxServers
	}
	if c.ToolsRefresh <= 0 {
		c.ToolsRefresh = d.ToolsRefresh
	}
	if c.StopGrace <= 0 {
		c.StopGrace = d.StopGrace
	}
	if c.ReadyWait < 0 {
		c.ReadyWait = 0
	}
	if c.SyncInterval <= 0 {
		c.SyncInterval = d.SyncInterval
	}
	return c
}

func (c Config) cleanOptions() CleanOptions {
	return CleanOptions{MaxBytes: c.MaxTextBytes, CompactJSONOver: c.CompactJSONOver}
}
