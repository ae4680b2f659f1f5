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
	// FoldTurns is how many turns leave the window at once to be folded into the summary: the
	// window holds WindowTurns to WindowTurns+FoldTurns-1 turns, so the summary is extended
	// every FoldTurns turns instead of every turn. 1 to maxFoldTurns; zero (a Config built in
	// code) means 1, every turn folded as it leaves, while the flag's default is 4.
	FoldTurns int
}

// RegisterFlags registers the settings with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.WindowTurns, "session.window-turns", 12, "default number of complete turns in the context window")
	fs.IntVar(&c.TokenBudget, "session.token-budget", 8000, "default token budget of the context window; whole turns are dropped oldest first beyond it")
	fs.IntVar(&c.MaxEvicted, "session.max-evicted", 200, "default cap on evicted messages returned by BuildContext")
	fs.IntVar(&c.FoldTurns, "session.fold-turns", 4, "turns that leave the context window are folded into the summary this many at a time (1 to 200; 1 = every turn); the window holds window-turns to window-turns+fold-turns-1 turns")
}
