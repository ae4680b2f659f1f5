package session

import "flag"

// Config holds the session service's settings; each is a flag under "session." with an
// environment variable (HERMES_SESSION_...) and a YAML key (session: {...}).
type Config struct {
	// WindowTurns is the default number of complete turns in a context window.
	WindowTurns int
	// TokenBudget is the default token budget of a window.
	TokenBudget int
	// MaxEvicted is the default cap on evicted messages returned by BuildContext.
	MaxEvicted int
}

// RegisterFlags registers the settings with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.WindowTurns, "session.window-turns", 12, "default number of complete turns in the context window")
	fs.IntVar(&c.TokenBudget, "session.token-budget", 8000, "default token budget of the context window; whole turns are dropped oldest first beyond it")
	fs.IntVar(&c.MaxEvicted, "session.max-evicted", 200, "default cap on evicted messages returned by BuildContext")
}
