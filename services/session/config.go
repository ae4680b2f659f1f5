package session

import (
	"flag"
	"runtime"
)

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
	// Files is how many bbolt files a new data directory spreads its sessions over (monolithic
	// mode, OpenBoltFiles): each file has its own writer. 0 picks FilesOrDefault's number.
	Files int
}

// RegisterFlags registers the settings with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.WindowTurns, "session.window-turns", 12, "default number of complete turns in the context window")
	fs.IntVar(&c.TokenBudget, "session.token-budget", 8000, "default token budget of the context window; whole turns are dropped oldest first beyond it")
	fs.IntVar(&c.MaxEvicted, "session.max-evicted", 200, "default cap on evicted messages returned by BuildContext")
	fs.IntVar(&c.Files, "session.files", 0, "monolithic mode: how many files a new data directory spreads its sessions over, each with its own writer (1 to 64; 0 = one for every 8 CPUs Go may use, 1 to 8); a data directory keeps the number it was created with")
	fs.IntVar(&c.FoldTurns, "session.fold-turns", 4, "turns that leave the context window are folded into the summary this many at a time (1 to 200; 1 = every turn); the window holds window-turns to window-turns+fold-turns-1 turns")
}

// FilesOrDefault is Files, or when it is 0 one file for every 8 CPUs, 1 to 8. A second file
// costs CPU a turn where the cores are all busy (its commits group fewer turns) and pays where
// one file's writer is the limit, as on a many-core machine at 64 turns at once (bench/README,
// "Several files").
func (c Config) FilesOrDefault() int {
	if c.Files != 0 {
		return c.Files
	}
	return min(max(runtime.GOMAXPROCS(0)/8, 1), 8)
}
