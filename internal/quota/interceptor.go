package quota

import (
	"context"
	"crypto/rand"
	"time"

	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc"

	"github.com/hermes-agent/hermes/internal/auth"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// runningTTL is how long a turn's slot lasts without renewal: a replica that dies mid-turn
// frees its user's slot within it. Running turns renew every third of it.
const runningTTL = 45 * time.Second

// UnaryInterceptor enforces the session limits: sessions on CreateSession, message rate and
// stored bytes on AppendMessages, and gives back what DeleteSession frees. A refusal happens
// before the handler runs, so nothing of the request is stored.
func (q *Quotas) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		switch r := req.(type) {
		case *sessionv1.CreateSessionRequest:
			return q.createSession(ctx, r, handler)
		case *sessionv1.AppendMessagesRequest:
			return q.appendMessages(ctx, r, handler)
		case *sessionv1.DeleteSessionRequest:
			resp, err := handler(ctx, req)
			if err == nil && q.hosted {
				q.sessionDeleted(ctx, r.GetUserId(), r.GetSessionId())
			}
			return resp, err
		}
		return handler(ctx, req)
	}
}

func principalLimits(ctx context.Context, c Config) (Limits, bool) {
	p, ok := auth.FromContext(ctx)
	if !ok {
		return Limits{}, false
	}
	return c.For(p)
}

// counted reserves n of the user's counter key within limit (limit is 0 for callers that are
// not limited) where the counter is kept, or checks it where it is not; undo gives it back.
func (q *Quotas) counted(ctx context.Context, key string, n, limit int64, what string) (undo func(), err error) {
	if !q.hosted {
		if limit <= 0 {
			return func() {}, nil
		}
		v, _, err := q.store.Add(ctx, key, 0, 0, 0)
		if err != nil {
			return nil, err
		}
		if v+n > limit {
			return nil, refuse(time.Minute, "quota: %s: %d of %d used", what, v, limit)
		}
		return func() {}, nil
	}
	v, ok, err := q.store.Add(ctx, key, n, limit, 0)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, refuse(time.Minute, "quota: %s: %d of %d used; this request needs %d more", what, v, limit, n)
	}
	return func() {
		if _, _, err := q.store.Add(context.WithoutCancel(ctx), key, -n, 0, 0); err != nil {
			q.log.WarnContext(ctx, "quota: a refused request's reservation not given back", "key", key, "error", err)
		}
	}, nil
}

func (q *Quotas) createSession(ctx context.Context, r *sessionv1.CreateSessionRequest, handler grpc.UnaryHandler) (any, error) {
	lim, _ := principalLimits(ctx, q.cfg)
	return q.handleCounted(ctx, sessionsKey(r.GetUserId()), 1, lim.Sessions, "sessions", r, handler)
}

// handleCounted reserves n of a counted quota (counted), calls the handler, and gives the
// reservation back when the handler fails.
func (q *Quotas) handleCounted(ctx context.Context, key string, n, limit int64, what string, r any, handler grpc.UnaryHandler) (any, error) {
	undo, err := q.counted(ctx, key, n, limit, what)
	if err != nil {
		return nil, err
	}
	resp, err := handler(ctx, r)
	if err != nil {
		undo()
	}
	return resp, err
}

func (q *Quotas) appendMessages(ctx context.Context, r *sessionv1.AppendMessagesRequest, handler grpc.UnaryHandler) (any, error) {
	lim, limited := principalLimits(ctx, q.cfg)
	user := r.GetUserId()
	if limited {
		if err := q.rate(ctx, appendsKey(user), int64(max(len(r.GetMessages()), 1)), lim.AppendsPerMinute, "messages appended"); err != nil {
			return nil, err
		}
	}
	var size int64
	for _, m := range r.GetMessages() {
		size += int64(len(m.GetContent()))
	}
	resp, err := q.handleCounted(ctx, bytesKey(user), size, lim.StoredBytes, "stored bytes", r, handler)
	if err != nil {
		return resp, err
	}
	if q.hosted && size > 0 {
		if _, _, err := q.store.Add(ctx, sessionBytesKey(r.GetSessionId()), size, 0, 0); err != nil {
			q.log.WarnContext(ctx, "quota: a session's bytes not counted", "session", r.GetSessionId(), "error", err)
		}
	}
	return resp, nil
}

// sessionDeleted gives back a deleted session's count and bytes.
func (q *Quotas) sessionDeleted(ctx context.Context, user, session string) {
	ctx = context.WithoutCancel(ctx)
	if _, _, err := q.store.Add(ctx, sessionsKey(user), -1, 0, 0); err != nil {
		q.log.WarnContext(ctx, "quota: a deleted session not given back", "user", user, "error", err)
	}
	n, err := q.store.Drain(ctx, sessionBytesKey(session))
	if err == nil && n > 0 {
		_, _, err = q.store.Add(ctx, bytesKey(user), -n, 0, 0)
	}
	if err != nil {
		q.log.WarnContext(ctx, "quota: a deleted session's bytes not given back", "user", user, "error", err)
	}
}

// StreamInterceptor admits RunTurn calls: for a limited user the turns a minute, the tokens of
// the day, the stored bytes and the turns at once; then, for everyone, a slot of this process's
// fair queue. The turn's usage is charged to the user's tokens of the day as it ends.
func (q *Quotas) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if info.FullMethod != orchestratorv1.OrchestratorService_RunTurn_FullMethodName {
			return handler(srv, ss)
		}
		ctx := ss.Context()
		p, _ := auth.FromContext(ctx)
		lim, limited := q.cfg.For(p)
		queueKey := p.Name
		if limited {
			queueKey = "user:" + p.User
			release, err := q.admitTurn(ctx, p.User, lim)
			if err != nil {
				return err
			}
			defer release()
		}
		leave, err := q.fair.Wait(ctx, queueKey)
		if err != nil {
			return err
		}
		defer leave()
		if !limited || lim.TokensPerDay <= 0 {
			return handler(srv, ss)
		}
		return handler(srv, &chargingStream{ServerStream: ss, q: q, user: p.User})
	}
}

// admitTurn checks a user's turn limits and holds one of the user's running slots, renewed
// until release.
func (q *Quotas) admitTurn(ctx context.Context, user string, lim Limits) (release func(), err error) {
	if lim.TokensPerDay > 0 {
		key, left := q.tokensKey(user)
		used, _, err := q.store.Add(ctx, key, 0, 0, 0)
		if err != nil {
			return nil, err
		}
		if used >= lim.TokensPerDay {
			return nil, refuse(left, "quota: %d of %d model tokens of the day (UTC) used; retry after midnight UTC", used, lim.TokensPerDay)
		}
	}
	if lim.StoredBytes > 0 {
		used, _, err := q.store.Add(ctx, bytesKey(user), 0, 0, 0)
		if err != nil {
			return nil, err
		}
		if used >= lim.StoredBytes {
			return nil, refuse(time.Hour, "quota: %d of %d stored bytes used; delete sessions to make room", used, lim.StoredBytes)
		}
	}
	// The slot is taken before the turn a minute is spent, so a turn refused for running too
	// many at once costs none of the user's turns a minute.
	if lim.ConcurrentTurns <= 0 {
		return func() {}, q.rate(ctx, turnsKey(user), 1, lim.TurnsPerMinute, "turns")
	}
	key, holder := runningKey(user), ulid.MustNew(ulid.Now(), rand.Reader).String()
	ok, err := q.store.Acquire(ctx, key, holder, lim.ConcurrentTurns, runningTTL)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, refuse(time.Second, "quota: at most %d turns of this user at once; retry when one ends", lim.ConcurrentTurns)
	}
	if err := q.rate(ctx, turnsKey(user), 1, lim.TurnsPerMinute, "turns"); err != nil {
		if rerr := q.store.Release(context.WithoutCancel(ctx), key, holder); rerr != nil {
			q.log.WarnContext(ctx, "quota: a refused turn's slot not released (it expires)", "user", user, "error", rerr)
		}
		return nil, err
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(runningTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if _, err := q.store.Acquire(context.WithoutCancel(ctx), key, holder, lim.ConcurrentTurns, runningTTL); err != nil {
					q.log.WarnContext(ctx, "quota: a running turn's slot not renewed", "user", user, "error", err)
				}
			}
		}
	}()
	return func() {
		close(stop)
		<-done
		if err := q.store.Release(context.WithoutCancel(ctx), key, holder); err != nil {
			q.log.WarnContext(ctx, "quota: a turn's slot not released (it expires)", "user", user, "error", err)
		}
	}, nil
}

// chargingStream charges the usage of the turn's final event to the user's tokens of the day.
type chargingStream struct {
	grpc.ServerStream
	q    *Quotas
	user string
}

func (s *chargingStream) SendMsg(m any) error {
	if r, ok := m.(*orchestratorv1.RunTurnResponse); ok {
		var u *orchestratorv1.Usage
		switch ev := r.GetEvent().GetEvent().(type) {
		case *orchestratorv1.TurnEvent_Completed:
			u = ev.Completed.GetUsage()
		case *orchestratorv1.TurnEvent_Failed:
			u = ev.Failed.GetUsage()
		}
		if u != nil {
			s.q.ChargeTokens(context.WithoutCancel(s.Context()), s.user, u.GetTotalTokens())
		}
	}
	return s.ServerStream.SendMsg(m)
}
