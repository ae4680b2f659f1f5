package app

import (
	"context"

	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	"github.com/hermes-agent/hermes/services/session"
)

func (a *App) initSession(ctx context.Context) error {
	tok, err := a.Tokenizer()
	if err != nil {
		return err
	}
	rdb, err := a.Redis(ctx)
	if err != nil {
		return err
	}
	var store session.Store
	if rdb != nil {
		store = session.NewRedisStore(rdb, a.cfg.RedisPrefix+"session:")
		a.watchRedis(sessionv1.SessionService_ServiceDesc.ServiceName, rdb)
	} else if store, err = a.sessionBoltFile(); err != nil {
		return err
	}
	svc, err := session.NewService(a.cfg.Session, session.Options{Store: store, Tokenizer: tok, Logger: a.log})
	if err != nil {
		return err
	}
	a.srv.Register(&sessionv1.SessionService_ServiceDesc, svc)
	return nil
}

// sessionBoltFile opens session.db once (the quota's counters and the orchestrator's records
// share it), closed after the stores in it.
func (a *App) sessionBoltFile() (*session.BoltStore, error) {
	if a.sessionFile != nil {
		return a.sessionFile, nil
	}
	bs, err := openInDataDir(a, "session.db", session.OpenBoltStore)
	if err != nil {
		return nil, err
	}
	_, group := bs.File()
	if err := group.ObserveBusy("session.db"); err != nil {
		a.log.Warn("session.db: no writer metric", "error", err)
	}
	a.sessionFile = bs
	return bs, nil
}
