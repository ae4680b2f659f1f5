// Package config loads Hermes' configuration. Every setting is a flag; each flag also has an
// environment variable (HERMES_ plus the flag name in upper case with "-" and "." as "_") and a
// key in the optional YAML file. Flags override environment variables, which override the file,
// which overrides the defaults.
package config

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hermes-agent/hermes/internal/rpc"
)

// EnvName is the environment variable of a flag: "redis-url" is HERMES_REDIS_URL and
// "memory.min-similarity" is HERMES_MEMORY_MIN_SIMILARITY.
func EnvName(flagName string) string {
	r := strings.NewReplacer("-", "_", ".", "_")
	return "HERMES_" + strings.ToUpper(r.Replace(flagName))
}

// Load parses args into fs and fills every flag not given on the command line from the
// environment (through getenv) or, failing that, from the YAML file named by the flag
// configFlag (when fs has it and it is set by any layer).
func Load(fs *flag.FlagSet, args []string, getenv func(string) string, configFlag string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })

	// The config file's own path may come from the environment.
	if cf := fs.Lookup(configFlag); cf != nil && !onCommandLine[configFlag] {
		if v := getenv(EnvName(configFlag)); v != "" {
			if err := cf.Value.Set(v); err != nil {
				return fmt.Errorf("%s: %w", EnvName(configFlag), err)
			}
		}
	}
	fromFile := map[string]string{}
	if cf := fs.Lookup(configFlag); cf != nil && cf.Value.String() != "" {
		var err error
		if fromFile, err = readFile(cf.Value.String()); err != nil {
			return err
		}
	}
	var errs []error
	keys := make([]string, 0, len(fromFile))
	for k := range fromFile {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if fs.Lookup(k) == nil {
			errs = append(errs, fmt.Errorf("config file: unknown setting %q", k))
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if onCommandLine[f.Name] || f.Name == configFlag {
			return
		}
		if v, ok := lookupEnv(getenv, f.Name); ok {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", EnvName(f.Name), v, err))
			}
			return
		}
		if v, ok := fromFile[f.Name]; ok {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("config file %s=%q: %w", f.Name, v, err))
			}
		}
	})
	return errors.Join(errs...)
}

func lookupEnv(getenv func(string) string, name string) (string, bool) {
	v := getenv(EnvName(name))
	return v, v != ""
}

// readFile reads a YAML file into flag-name → value. Nested maps join their keys with ".", so
// `memory: {min-similarity: 0.5}` sets memory.min-similarity; lists become comma-separated.
func readFile(path string) (map[string]string, error) {
	data, err := os.ReadFile(path) // #nosec G304 -- the operator's --config file
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	var root map[string]any
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	out := map[string]string{}
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			key := k
			if prefix != "" {
				key = prefix + "." + k
			}
			switch x := v.(type) {
			case map[string]any:
				walk(key, x)
			case []any:
				parts := make([]string, len(x))
				for i, e := range x {
					parts[i] = fmt.Sprint(e)
				}
				out[key] = strings.Join(parts, ",")
			case nil:
			default:
				out[key] = fmt.Sprint(x)
			}
		}
	}
	walk("", root)
	return out, nil
}

// DefaultDataDir is a "hermes" folder under the user's data directory: $XDG_DATA_HOME or
// ~/.local/share on Unix, ~/Library/Application Support on macOS, %LocalAppData% on Windows.
func DefaultDataDir() string {
	home, _ := os.UserHomeDir()
	switch runtime.GOOS {
	case "darwin":
		return filepath.Join(home, "Library", "Application Support", "hermes")
	case "windows":
		if d := os.Getenv("LocalAppData"); d != "" {
			return filepath.Join(d, "hermes")
		}
	}
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "hermes")
	}
	return filepath.Join(home, ".local", "share", "hermes")
}

// Common holds the settings every target shares: where to listen, where the data and the
// backends are, the model endpoints, and how the services reach each other.
type Common struct {
	Listen          string
	DataDir         string
	RedisURL        string
	RedisPrefix     string
	NATSURL         string
	NATSNamespace   string
	NATSReplicas    int
	QdrantAddr      string
	QdrantAPIKey    string
	QdrantTLS       bool
	ModelBaseURL    string
	ModelAPIKey     string
	Model           string
	ExtractModel    string
	EmbedBaseURL    string
	EmbedModel      string
	Tokenizer       string
	LogLevel        string
	LogFormat       string
	MetricsListen   string
	ShutdownTimeout time.Duration
	DrainDelay      time.Duration

	// Access and transport security (see README "Access and security").
	AuthFile       string
	InsecureNoAuth bool
	ServiceKeyFile string
	TLSCert        string
	TLSKey         string
	TLSClientCA    string
	TLSClientAuth  string
	TLSCA          string
	TLSServerName  string
	// Operator allowlists of the powers that read secrets or reach other hosts.
	SecretEnvAllow []string
	EgressAllow    []string

	// Addresses of the services, for targets that call others. Empty means "in this process".
	SessionAddr      string
	ToolsAddr        string
	MCPGatewayAddr   string
	MemoryAddr       string
	OrchestratorAddr string

	// NATSPort is the embedded NATS server's loopback port; 0 picks a free one.
	NATSPort int
	// EventsKeyFile and EventsKey: the key(s) that sign turn.finished events (one per line, the
	// first signs); the same on every orchestrator and memory process.
	EventsKeyFile string
	EventsKey     string
	// HealthListen is the plaintext HTTP address of /readyz and /livez (probes); empty disables it.
	HealthListen string
}

// RegisterFlags registers the common settings with their defaults.
func (c *Common) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", "127.0.0.1:7070", "gRPC listen address")
	fs.StringVar(&c.DataDir, "data-dir", DefaultDataDir(), "data directory of the embedded stores (monolithic mode)")
	fs.StringVar(&c.RedisURL, "redis-url", "", "Redis URL: one node (redis://host:port/db) or Sentinel's primary (redis://sentinel:26379/db?master_name=NAME&addr=sentinel2:26379); Redis Cluster is not supported; empty uses the embedded stores")
	fs.StringVar(&c.RedisPrefix, "redis-prefix", "hermes:", "prefix of every Redis key")
	fs.StringVar(&c.NATSURL, "nats-url", "", "NATS URL; empty runs an embedded NATS server with JetStream")
	fs.StringVar(&c.NATSNamespace, "nats-namespace", "", "namespace for the stream and subjects on a shared NATS server (empty: HERMES_EVENTS, hermes.turn.finished.<user>)")
	fs.IntVar(&c.NATSReplicas, "nats-replicas", 1, "copies of the event stream a NATS cluster keeps (3 for a production cluster)")
	fs.IntVar(&c.NATSPort, "nats-port", 0, "loopback port of the embedded NATS server (when --nats-url is empty); 0 picks a free port")
	fs.StringVar(&c.EventsKeyFile, "events-key-file", "", "file of the key that signs turn.finished events (one key per line, at least 32 characters, the first signs, the others are still accepted); required with --nats-url on the orchestrator and memory, the same on both; the embedded NATS uses a key kept in the data directory")
	fs.StringVar(&c.EventsKey, "events-key", "", "the events key itself, instead of --events-key-file; prefer the variable HERMES_EVENTS_KEY to the flag")
	fs.StringVar(&c.HealthListen, "health-listen", "", "plaintext HTTP address serving only /readyz and /livez for probes (for example 0.0.0.0:8081); empty disables it")
	fs.StringVar(&c.QdrantAddr, "qdrant-addr", "", "Qdrant gRPC address (host:6334); empty uses the embedded vector index")
	fs.StringVar(&c.QdrantAPIKey, "qdrant-api-key", "", "Qdrant API key (its service.api_key); prefer the variable HERMES_QDRANT_API_KEY to the flag")
	fs.BoolVar(&c.QdrantTLS, "qdrant-tls", false, "connect to Qdrant over TLS")
	fs.StringVar(&c.ModelBaseURL, "model-base-url", "", "OpenAI-compatible Chat Completions base URL (for example https://api.openai.com/v1)")
	fs.StringVar(&c.ModelAPIKey, "model-api-key", "", "API key of the model endpoint (falls back to OPENAI_API_KEY)")
	fs.StringVar(&c.Model, "model", "gpt-4o-mini", "chat model name")
	fs.StringVar(&c.ExtractModel, "extract-model", "", "model for memory extraction; empty means --model")
	fs.StringVar(&c.EmbedBaseURL, "embed-base-url", "", "OpenAI-compatible /v1/embeddings base URL; empty uses the lexical hashing embedder")
	fs.StringVar(&c.EmbedModel, "embed-model", "text-embedding-3-small", "embedding model name")
	fs.StringVar(&c.Tokenizer, "tokenizer", "o200k_base", "tiktoken encoding used to count tokens (o200k_base, cl100k_base, p50k_base, r50k_base)")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.LogFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&c.MetricsListen, "metrics-listen", "", "HTTP address for Prometheus /metrics; empty disables it")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 20*time.Second, "how long in-flight calls may drain on SIGTERM")
	fs.DurationVar(&c.DrainDelay, "drain-delay", 0, "how long to keep serving after health turns NOT_SERVING on SIGTERM")
	fs.StringVar(&c.AuthFile, "auth-file", "", "YAML file of API keys and their principals (\"<key>: <user_id>\" or \"<key>: {role: user|operator|service, user: …}\"), re-read when it changes; every RPC then needs \"authorization: Bearer <key>\"")
	fs.BoolVar(&c.InsecureNoAuth, "insecure-no-auth", false, "allow listening on a non-loopback address without API keys or client certificates (anyone who reaches the port owns every user's data; not for production)")
	fs.StringVar(&c.ServiceKeyFile, "service-key-file", "", "file holding an API key of role service, sent on calls to other Hermes services (when they are not reached with mutual TLS)")
	fs.StringVar(&c.TLSCert, "tls-cert", "", "PEM certificate chain served on the gRPC listener and presented to other Hermes services (reloaded when it changes)")
	fs.StringVar(&c.TLSKey, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&c.TLSClientCA, "tls-client-ca", "", "PEM CA bundle that signs Hermes' own certificates: a caller with a certificate it verifies is the service principal")
	fs.Func("tls-client-auth", "with --tls-client-ca: require (only callers with a certificate connect; the default) or optional (users with API keys connect too)", func(v string) error {
		if v != "require" && v != "optional" {
			return fmt.Errorf("want require or optional")
		}
		c.TLSClientAuth = v
		return nil
	})
	fs.StringVar(&c.TLSCA, "tls-ca", "", "PEM CA bundle that verifies the Hermes services this process calls; turns TLS on for those calls")
	fs.StringVar(&c.TLSServerName, "tls-server-name", "", "name expected in the called services' certificates (default: the host of their address)")
	fs.Func("secret-env-allow", "comma list of environment variables that tools and MCP servers may read secrets from (secret_env, bearer_token_env, header env); none by default", listFlag(&c.SecretEnvAllow))
	fs.Func("egress-allow", "comma list of host:port (or host:* / CIDR:port) that webhooks, HTTP MCP servers and http_fetch may reach although they are loopback, private or link-local addresses", listFlag(&c.EgressAllow))
	fs.StringVar(&c.SessionAddr, "session-addr", "", "address of the session service; empty means this process")
	fs.StringVar(&c.ToolsAddr, "tools-addr", "", "address of the tool service; empty means this process")
	fs.StringVar(&c.MCPGatewayAddr, "mcpgateway-addr", "", "address of the MCP gateway; empty means this process")
	fs.StringVar(&c.MemoryAddr, "memory-addr", "", "address of the memory service; empty means this process")
	fs.StringVar(&c.OrchestratorAddr, "orchestrator-addr", "", "address of the orchestrator; empty means this process")
}

// APIKey returns the model API key, falling back to OPENAI_API_KEY.
func (c *Common) APIKey(getenv func(string) string) string {
	if c.ModelAPIKey != "" {
		return c.ModelAPIKey
	}
	return getenv("OPENAI_API_KEY")
}

// listFlag parses a comma-separated list into *dst (each flag occurrence replaces the list, so
// the environment and the file follow the same rule as the command line).
func listFlag(dst *[]string) func(string) error {
	return func(v string) error {
		*dst = SplitList(v)
		return nil
	}
}

// SplitList splits a comma-separated list, trimming blanks and dropping empty items.
func SplitList(v string) []string {
	var out []string
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// TLS is the transport security configuration of the process.
func (c *Common) TLS() rpc.TLSConfig {
	return rpc.TLSConfig{
		CertFile: c.TLSCert, KeyFile: c.TLSKey, ClientCAFile: c.TLSClientCA, ClientAuth: c.TLSClientAuth,
		CAFile: c.TLSCA, ServerName: c.TLSServerName,
	}
}
