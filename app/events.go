package app

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hermes-agent/hermes/internal/events"
)

// checkNATSURL refuses a NATS server on another host reached without credentials: anyone who
// reaches it reads every user's turns. --insecure-no-auth accepts the risk.
func (a *App) checkNATSURL(url string) error {
	if url == "" || events.URLIsLoopback(url) || events.URLHasCredentials(url) {
		return nil
	}
	if a.cfg.InsecureNoAuth {
		a.log.Warn("INSECURE: NATS on another host without credentials: anyone who reaches it reads every user's turns", "nats", redactNATS(url))
		return nil
	}
	return fmt.Errorf("refusing NATS at %s without credentials (--nats-url): anyone who reaches it reads every user's turns and can flood the extractor. "+
		"Put a user and password or a token in the URL (nats://user:password@host:4222), or accept the risk with --insecure-no-auth", redactNATS(url))
}

// redactNATS is a NATS URL without its credentials, for messages.
func redactNATS(url string) string {
	if events.URLHasCredentials(url) {
		return "(a URL with credentials)"
	}
	return url
}

// EventKeys returns the keyring that signs and verifies turn.finished events: the configured
// key (--events-key-file or HERMES_EVENTS_KEY); with the embedded NATS, a key generated once and
// kept in the data directory (events signed before a restart still verify after it). An external
// NATS without a configured key is refused, unless --insecure-no-auth, which signs nothing and
// accepts every event.
func (a *App) EventKeys() (*events.Keyring, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.eventKeys != nil {
		return a.eventKeys, nil
	}
	k, err := a.loadEventKeys()
	if err != nil {
		return nil, err
	}
	a.eventKeys = k
	return k, nil
}

func (a *App) loadEventKeys() (*events.Keyring, error) {
	c := a.cfg.Common
	switch {
	case c.EventsKeyFile != "" && c.EventsKey != "":
		return nil, errors.New("set one of --events-key-file and --events-key (HERMES_EVENTS_KEY), not both")
	case c.EventsKeyFile != "":
		return events.LoadKeyring(c.EventsKeyFile)
	case c.EventsKey != "":
		k, err := events.ParseKeyring(c.EventsKey)
		if err != nil {
			return nil, fmt.Errorf("HERMES_EVENTS_KEY: %w", err)
		}
		return k, nil
	case c.NATSURL == "":
		return a.dataDirEventKeys()
	case c.InsecureNoAuth:
		a.log.Warn("INSECURE: no events key (--events-key-file): turn.finished events are not signed, and forged ones write memories into any user's account")
		return events.InsecureAcceptAll(), nil
	}
	return nil, errors.New("--nats-url needs an events key, the same on every orchestrator and memory process, so that forged turn.finished events are refused: " +
		"set --events-key-file or HERMES_EVENTS_KEY (generate one with: openssl rand -hex 32), or accept forged events with --insecure-no-auth")
}

// dataDirEventKeys reads the embedded mode's events key from the data directory, creating it
// (readable by this user only) on first use.
func (a *App) dataDirEventKeys() (*events.Keyring, error) {
	if err := os.MkdirAll(a.cfg.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	path := filepath.Join(a.cfg.DataDir, "events.key")
	if k, err := events.LoadKeyring(path); err == nil {
		return k, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	key, err := events.RandomKey()
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600) // #nosec G304 -- in the operator's data directory
	if err != nil {
		if errors.Is(err, os.ErrExist) { // another process of this data directory wrote it first
			return events.LoadKeyring(path)
		}
		return nil, fmt.Errorf("events key: %w", err)
	}
	_, werr := f.WriteString(key + "\n")
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return nil, fmt.Errorf("events key: %w", werr)
	}
	return events.ParseKeyring(key)
}
