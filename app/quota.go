package app

import (
	"context"
	"fmt"

	"github.com/hermes-agent/hermes/internal/boltstore"
	"github.com/hermes-agent/hermes/internal/quota"
	"github.com/hermes-agent/hermes/internal/rpc"
)

// initQuota installs the per-user quotas on a process that serves sessions or turns: counters in
// Redis when one is configured (shared by the replicas), else in the process with the counters
// that must survive a restart in session.db where this process keeps sessions (moved in from
// the quota.db of an earlier version), else in quota.db.
func (a *App) initQuota(ctx context.Context, opts *rpc.ServerOptions) error {
	if !a.targets[TargetSession] && !a.targets[TargetOrchestrator] {
		return nil
	}
	rdb, err := a.Redis(ctx)
	if err != nil {
		return err
	}
	var store quota.Store
	switch {
	case rdb != nil:
		store = quota.NewRedisStore(rdb, a.cfg.RedisPrefix+"quota:")
	case a.targets[TargetSession]:
		// In the session store's file: a turn's counting commits with its writes.
		if store, err = a.quotaInSessionFile(); err != nil {
			return err
		}
	default:
		if store, err = openInDataDir(a, "quota.db", quota.OpenBoltStore); err != nil {
			return err
		}
	}
	q, err := quota.New(a.cfg.Quota, quota.Options{Store: store, SessionHosted: a.targets[TargetSession], Logger: a.log})
	if err != nil {
		return err
	}
	opts.Unary = append(opts.Unary, q.UnaryInterceptor())
	opts.Stream = append(opts.Stream, q.StreamInterceptor())
	return nil
}

// quotaInSessionFile opens the session store's files (initSession uses them then) and keeps the
// counters in the first.
func (a *App) quotaInSessionFile() (*quota.BoltStore, error) {
	files, err := a.sessionBoltFiles()
	if err != nil {
		return nil, err
	}
	db, g := files[0].File()
	old, err := a.dataPath("quota.db")
	if err != nil {
		return nil, err
	}
	moved, err := boltstore.MoveInto(g, old)
	if err != nil {
		return nil, fmt.Errorf("quota counters: %w", err)
	}
	if moved {
		a.log.Info("quota counters moved into session.db", "from", old, "renamed_to", old+".moved")
	}
	st, err := quota.OpenBoltStoreOn(db, g)
	if err != nil {
		return nil, err
	}
	a.onClose(func() { _ = st.Close() })
	return st, nil
}
