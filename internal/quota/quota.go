// Package quota limits what each user may use — sessions, stored bytes, message rate, turns at
// once, turns a minute, model tokens a day — and schedules turns fairly across users. The
// limits are the operator's defaults (flags "quota.*") overridden per key in the auth file
// (internal/auth Quota). Operators, services and anonymous callers (authentication off) are not
// limited. Enforcement is one pair of interceptors (interceptor.go) installed by internal/rpc
// after authentication, keyed by the authenticated user; counters live in Redis (shared by
// replicas) or in the process (the monolith, with counters in a bbolt file).
//
// A refusal is errclass.Exhausted with the time after which the same request may succeed:
// RESOURCE_EXHAUSTED with google.rpc.RetryInfo over gRPC, 429 with Retry-After over HTTP.
package quota

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/hermes-agent/hermes/internal/auth"
	"github.com/hermes-agent/hermes/internal/errclass"
)

// Limits are one user's limits; 0 means no limit.
type Limits struct {
	// Sessions a user may hold at once.
	Sessions int64
	// StoredBytes is the content of the messages of a user's sessions (approximate: counted as
	// appended, given back when a session is deleted).
	StoredBytes int64
	// AppendsPerMinute is the messages a user may append a minute (a burst of as many).
	AppendsPerMinute int64
	// ConcurrentTurns is the turns a user may run at once.
	ConcurrentTurns int64
	// TurnsPerMinute is the turns a user may start a minute (a burst of as many).
	TurnsPerMinute int64
	// TokensPerDay is the model tokens (prompt and completion) a user's turns may use a UTC day.
	TokensPerDay int64
}

// Config holds the operator's defaults; each is a flag under "quota." with an environment
// variable (HERMES_QUOTA_...) and a YAML key (quota: {...}).
type Config struct {
	Limits
	// TurnSlots is how many turns this process runs at once; more wait in a queue served
	// round-robin by user. 0 is no cap.
	TurnSlots int
}

// The defaults are generous: they stop floods, not ordinary use.
const (
	defaultSessions         = 10_000
	defaultStoredBytes      = 1 << 30
	defaultAppendsPerMinute = 600
	DefaultConcurrentTurns  = 8
	defaultTurnsPerMinute   = 120
	defaultTokensPerDay     = 10_000_000
	DefaultTurnSlots        = 256
)

// RegisterFlags registers the settings with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Int64Var(&c.Sessions, "quota.sessions", defaultSessions, "sessions a user may hold (0: no limit; auth-file quota.sessions overrides it per key)")
	fs.Int64Var(&c.StoredBytes, "quota.stored-bytes", defaultStoredBytes, "bytes of message content a user may store across sessions, approximate (0: no limit)")
	fs.Int64Var(&c.AppendsPerMinute, "quota.appends-per-minute", defaultAppendsPerMinute, "messages a user may append a minute, in bursts of as many (0: no limit)")
	fs.Int64Var(&c.ConcurrentTurns, "quota.concurrent-turns", DefaultConcurrentTurns, "turns a user may run at once (0: no limit)")
	fs.Int64Var(&c.TurnsPerMinute, "quota.turns-per-minute", defaultTurnsPerMinute, "turns a user may start a minute, in bursts of as many (0: no limit)")
	fs.Int64Var(&c.TokensPerDay, "quota.tokens-per-day", defaultTokensPerDay, "model tokens a user's turns may use a UTC day (0: no limit)")
	fs.IntVar(&c.TurnSlots, "quota.turn-slots", DefaultTurnSlots, "turns this process runs at once; more wait, served round-robin by user (0: no cap)")
}

// Validate refuses negative settings.
func (c Config) Validate() error {
	for name, v := range map[string]int64{
		"sessions": c.Sessions, "stored-bytes": c.StoredBytes, "appends-per-minute": c.AppendsPerMinute,
		"concurrent-turns": c.ConcurrentTurns, "turns-per-minute": c.TurnsPerMinute, "tokens-per-day": c.TokensPerDay,
		"turn-slots": int64(c.TurnSlots),
	} {
		if v < 0 {
			return fmt.Errorf("quota.%s is %d; want 0 (no limit) or more", name, v)
		}
	}
	return nil
}

// For returns the limits of p: the defaults with the key's own quota, and false for principals
// that are not limited (operators, services, anonymous callers).
func (c Config) For(p auth.Principal) (Limits, bool) {
	if p.Anonymous || p.Role != auth.RoleUser {
		return Limits{}, false
	}
	l := c.Limits
	if q := p.Quota; q != nil {
		for _, o := range []struct {
			dst *int64
			v   *int64
		}{
			{&l.Sessions, q.Sessions}, {&l.StoredBytes, q.StoredBytes}, {&l.AppendsPerMinute, q.AppendsPerMinute},
			{&l.ConcurrentTurns, q.ConcurrentTurns}, {&l.TurnsPerMinute, q.TurnsPerMinute}, {&l.TokensPerDay, q.TokensPerDay},
		} {
			if o.v != nil {
				*o.dst = *o.v
			}
		}
	}
	return l, true
}

// Error is a refusal: a limit was reached, and the same request may succeed after RetryAfter.
type Error struct {
	msg   string
	retry time.Duration
}

func refuse(retry time.Duration, format string, args ...any) *Error {
	// Whole seconds, rounded up: Retry-After has no fractions, and a client that retries a little
	// early is refused again.
	return &Error{msg: fmt.Sprintf(format, args...), retry: max(retry, time.Second).Truncate(time.Second) + ceilSecond(retry)}
}

func (e *Error) Error() string { return e.msg }

// Public is the message for the caller.
func (e *Error) Public() string { return e.msg }

// Is makes the error of class errclass.Exhausted.
func (e *Error) Is(target error) bool { return target == errclass.Exhausted }

// RetryAfter is when the request may succeed.
func (e *Error) RetryAfter() time.Duration { return e.retry }

// Options configure Quotas.
type Options struct {
	// Store keeps the counters; required.
	Store Store
	// SessionHosted: the session service runs in this process, so its sessions and stored bytes
	// are counted here for every caller. A process that only passes a user's session calls on
	// (an edge) checks the user's counters without counting.
	SessionHosted bool
	// Logger; nil is slog.Default().
	Logger *slog.Logger
	// Now is the clock of the day boundary; nil is time.Now.
	Now func() time.Time
}

// Quotas enforces the limits.
type Quotas struct {
	cfg    Config
	store  Store
	hosted bool
	fair   *FairQueue
	log    *slog.Logger
	now    func() time.Time
}

// New returns the enforcer of cfg's limits.
func New(cfg Config, o Options) (*Quotas, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if o.Store == nil {
		return nil, fmt.Errorf("quota: a store is required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Quotas{cfg: cfg, store: o.Store, hosted: o.SessionHosted, fair: newFairQueue(cfg.TurnSlots), log: o.Logger, now: o.Now}, nil
}

// Keys of the counters. A user id is the last part, so no two users share a key.
func sessionsKey(user string) string        { return "sessions:" + user }
func bytesKey(user string) string           { return "bytes:" + user }
func sessionBytesKey(session string) string { return "session-bytes:" + session }
func appendsKey(user string) string         { return "appends:" + user }
func turnsKey(user string) string           { return "turns:" + user }
func runningKey(user string) string         { return "running:" + user }
func (q *Quotas) tokensKey(user string) (string, time.Duration) {
	now := q.now().UTC()
	midnight := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
	return "tokens:" + now.Format("20060102") + ":" + user, midnight.Sub(now)
}

// rate spends n of the user's bucket, or refuses with the wait.
func (q *Quotas) rate(ctx context.Context, key string, n, perMinute int64, what string) error {
	if perMinute <= 0 {
		return nil
	}
	if n > perMinute {
		return refuse(time.Minute, "%d %s at once is more than the %d a minute this user may make", n, what, perMinute)
	}
	wait, err := q.store.Take(ctx, key, n, perMinute)
	if err != nil {
		return err
	}
	if wait > 0 {
		e := refuse(wait, "quota: at most %d %s a minute", perMinute, what)
		e.msg += fmt.Sprintf("; retry in %s", e.retry)
		return e
	}
	return nil
}

// ChargeTokens adds tokens to the user's count of the day. Turns are refused once the count
// reaches the limit (a turn running then may go past it: the count is checked when a turn
// starts and charged when it ends).
func (q *Quotas) ChargeTokens(ctx context.Context, user string, tokens int64) {
	if tokens <= 0 || user == "" {
		return
	}
	key, left := q.tokensKey(user)
	// The count outlives its day by an hour, so a turn that ends after midnight is still counted
	// once; the next day has its own key.
	if _, _, err := q.store.Add(ctx, key, tokens, 0, left+time.Hour); err != nil {
		q.log.WarnContext(ctx, "quota: tokens not counted", "user", user, "tokens", tokens, "error", err)
	}
}

// ceilSecond is a second when d has a fraction of one, else 0.
func ceilSecond(d time.Duration) time.Duration {
	if d > time.Second && d%time.Second != 0 {
		return time.Second
	}
	return 0
}
