package tools

import (
	"flag"
	"strings"
	"time"
)

// Config holds the tools service's settings; each is a flag under "tools." (plus "tools-file")
// with an environment variable (HERMES_TOOLS_...) and a YAML key (tools: {...}).
type Config struct {
	// File is a YAML or JSON file of tool specs registered at start-up.
	File string
	// DefaultTimeout is a call's budget when the tool sets none.
	DefaultTimeout time.Duration
	// MaxTimeout caps the timeout a tool may declare.
	MaxTimeout time.Duration
	// DefaultMaxRetries applies when a tool leaves max_retries unset.
	DefaultMaxRetries int
	// RetryBackoff is the first retry's backoff; it doubles per retry, with jitter.
	RetryBackoff time.Duration
	// RetryMaxBackoff caps one backoff.
	RetryMaxBackoff time.Duration
	// IdempotencyTTL is how long an idempotency record is kept.
	IdempotencyTTL time.Duration
	// MaxOutputBytes is the largest output returned whole; longer output becomes a preview.
	MaxOutputBytes int
	// MaxResponseBytes is the most a webhook response body is read.
	MaxResponseBytes int
	// MaxArgumentBytes is the largest arguments text accepted.
	MaxArgumentBytes int
	// SelectThreshold: with more tools than this registered, SelectTools selects; else it returns
	// all.
	SelectThreshold int
	// SelectMax is the default maximum of tools SelectTools returns.
	SelectMax int
	// AlwaysInclude names tools every selection includes.
	AlwaysInclude string
	// FetchAllow is the http_fetch builtin's host allow-list (comma separated; "*.example.com"
	// matches subdomains).
	FetchAllow string
	// FetchMaxBytes caps the body http_fetch returns.
	FetchMaxBytes int
}

// RegisterFlags registers the settings with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.File, "tools-file", "", "YAML or JSON file of tool specs registered at start-up (tools: [{name, description, input_schema, http|mcp|builtin, ...}])")
	fs.DurationVar(&c.DefaultTimeout, "tools.default-timeout", 10*time.Second, "a tool call's budget (all attempts) when the tool declares none")
	fs.DurationVar(&c.MaxTimeout, "tools.max-timeout", 10*time.Minute, "the largest timeout a tool may declare")
	fs.IntVar(&c.DefaultMaxRetries, "tools.default-max-retries", 2, "retries on transient failures when the tool declares none")
	fs.DurationVar(&c.RetryBackoff, "tools.retry-backoff", 200*time.Millisecond, "backoff before the first retry; doubles per retry, with jitter")
	fs.DurationVar(&c.RetryMaxBackoff, "tools.retry-max-backoff", 5*time.Second, "cap of one retry backoff")
	fs.DurationVar(&c.IdempotencyTTL, "tools.idempotency-ttl", 24*time.Hour, "how long the result of an idempotent call is kept for its key")
	fs.IntVar(&c.MaxOutputBytes, "tools.max-output-bytes", 16<<10, "tool output longer than this is cut to a preview with a note")
	fs.IntVar(&c.MaxResponseBytes, "tools.max-response-bytes", 4<<20, "most bytes of a webhook response that are read")
	fs.IntVar(&c.MaxArgumentBytes, "tools.max-argument-bytes", 256<<10, "largest arguments JSON accepted by ExecuteTool")
	fs.IntVar(&c.SelectThreshold, "tools.select-threshold", 20, "SelectTools returns every tool while at most this many are registered")
	fs.IntVar(&c.SelectMax, "tools.select-max", 20, "default maximum number of tools SelectTools returns")
	fs.StringVar(&c.AlwaysInclude, "tools.always-include", "", "comma list of tools every SelectTools result includes")
	fs.StringVar(&c.FetchAllow, "tools.fetch-allow", "", "comma list of hosts the http_fetch builtin may fetch (\"*.example.com\" matches subdomains); empty refuses every fetch")
	fs.IntVar(&c.FetchMaxBytes, "tools.fetch-max-bytes", 64<<10, "most body bytes http_fetch returns")
}

// DefaultConfig returns the defaults RegisterFlags sets, for tests and embedding.
func DefaultConfig() Config {
	var c Config
	fs := flag.NewFlagSet("tools", flag.ContinueOnError)
	c.RegisterFlags(fs)
	return c
}

// withDefaults fills zero values, so a partly set Config still works.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.DefaultTimeout <= 0 {
		c.DefaultTimeout = d.DefaultTimeout
	}
	if c.MaxTimeout <= 0 {
		c.MaxTimeout = d.MaxTimeout
	}
	if c.DefaultMaxRetries < 0 {
		c.DefaultMaxRetries = 0
	}
	if c.RetryBackoff <= 0 {
		c.RetryBackoff = d.RetryBackoff
	}
	if c.RetryMaxBackoff <= 0 {
		c.RetryMaxBackoff = d.RetryMaxBackoff
	}
	if c.IdempotencyTTL <= 0 {
		c.IdempotencyTTL = d.IdempotencyTTL
	}
	if c.MaxOutputBytes <= 0 {
		c.MaxOutputBytes = d.MaxOutputBytes
	}
	if c.MaxResponseBytes <= 0 {
		c.MaxResponseBytes = d.MaxResponseBytes
	}
	if c.MaxArgumentBytes <= 0 {
		c.MaxArgumentBytes = d.MaxArgumentBytes
	}
	if c.SelectThreshold <= 0 {
		c.SelectThreshold = d.SelectThreshold
	}
	if c.SelectMax <= 0 {
		c.SelectMax = d.SelectMax
	}
	if c.FetchMaxBytes <= 0 {
		c.FetchMaxBytes = d.FetchMaxBytes
	}
	return c
}

// splitList splits a comma list, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
