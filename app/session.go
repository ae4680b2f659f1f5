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
	} else {
		files, err := a.sessionBoltFiles()
		if err != nil {
			return err
		}
		store = sessionStore(files)
	}
	svc, err := session.NewService(a.cfg.Session, session.Options{Store: store, Tokenizer: tok, Logger: a.log})
	if err != nil {
		return err
	}
	a.srv.Register(&sessionv1.SessionService_ServiceDesc, svc)
	return nil
}

// sessionBoltFiles opens the session files once (the quota's counters and the orchestrator's
// records share them), closed after the stores in them.
func (a *App) sessionBoltFiles() ([]*session.BoltStore, error) {
	if a.sessionFiles != nil {
		return a.sessionFiles, nil
	}
	dir, err := a.dataPath("")
	if err != nil {
		return nil, err
	}
	files, err := session.OpenBoltFiles(dir, a.cfg.Session.FilesOrDefault())
	if err != nil {
		return nil, err
	}
	store := session.NewFiles(files)
	a.onClose(func() { _ = store.Close() })
	for i, f := range files {
		_, group := f.File()
		if err := group.ObserveBusy(session.FileName(i)); err != nil {
			a.log.Warn(session.FileName(i)+": no writer metric", "error", err)
		}
	}
	if want := a.cfg.Session.Files; want != 0 && want != len(files) {
		a.log.Warn("session.files differs from the data directory's number of session files, which is kept", "session.files", want, "files", len(files), "dir", dir)
	}
	if len(files) > 1 {
		a.log.Info("sessions spread over several files", "files", len(files), "dir", dir)
	}
	a.sessionFiles = files
	return files, nil
}

// sessionStore is the Store over the session files: the file itself when there is one.
func sessionStore(files []*session.BoltStore) session.Store {
	if len(files) == 1 {
		return files[0]
	}
	return session.NewFiles(files)
}
