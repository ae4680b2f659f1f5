package app

import (
	"context"

	"github.com/hermes-agent/hermes/internal/quota"
	"github.com/hermes-agent/hermes/internal/rpc"
)

// initQuota installs the per-user quotas on a process that serves sessions or turns: counters in
// Redis when one is configured (shared by the replicas), else in the process with the counters
// that must survive a restart in quota.db.
func (a *App) initQuota(ctx context.Context, opts *rpc.ServerOptions) error {
	if !a.targets[TargetSession] && !a.targets[TargetOrchestrator] {
		return nil
	}
	rdb, err := a.Redis(ctx)
	if err != nil {
		return err
	}
	var store quota.Store
	if rdb != nil {
		store = quota.NewRedisStore(rdb, a.cfg.RedisPrefix+"quota:")
	} else if store, err = openInDataDir(a, "quota.db", quota.OpenBoltStore); err != nil {
		return err
	}
	q, err := quota.New(a.cfg.Quota, quota.Options{Store: store, SessionHosted: a.targets[TargetSession], Logger: a.log})
	if err != nil {
		return err
	}
	opts.Unary = append(opts.Unary, q.UnaryInterceptor())
	opts.Stream = append(opts.Stream, q.StreamInterceptor())
	return nil
}
