package app

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hermes-agent/hermes/internal/model/scripted"
)

// testEventsKey is the events key of the tests that run the memory target on the shared NATS.
const testEventsKey = "app-test-events-key-0123456789abcdef0123"

// newMemoryApp runs New for the memory target (with a model, so the consumer starts) and the
// given flags.
func newMemoryApp(t *testing.T, args ...string) (*App, error) {
	t.Helper()
	model, err := scripted.New(func(scripted.Request) scripted.Reply { return scripted.Text(`{"memories":[]}`) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(model.Close)
	var cfg Config
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	base := []string{"--target=memory", "--listen=127.0.0.1:0", "--data-dir=" + t.TempDir(), "--model-base-url=" + model.URL()}
	if err := fs.Parse(append(base, args...)); err != nil {
		t.Fatal(err)
	}
	a, err := New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil {
		t.Cleanup(func() { _ = a.Stop() })
	}
	return a, err
}

// A process that consumes or publishes events on an external NATS needs the events key, and a
// NATS on another host needs credentials; both refusals happen at start and say what to set.
func TestEventsStartupRefusals(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string // empty: starts
	}{
		{"remote NATS without credentials", []string{"--nats-url=nats://nats.example.invalid:4222", "--events-key=" + testEventsKey}, "refusing NATS at nats://nats.example.invalid:4222 without credentials"},
		{"one remote server of a list without credentials", []string{"--nats-url=nats://u:p@a.invalid:4222,nats://b.invalid:4222", "--events-key=" + testEventsKey}, "without credentials"},
		{"external NATS without an events key", []string{"--nats-url=nats://127.0.0.1:4222"}, "--nats-url needs an events key"},
		{"a short events key", []string{"--nats-url=nats://127.0.0.1:4222", "--events-key=short"}, "at least 32"},
		{"both key settings", []string{"--nats-url=nats://127.0.0.1:4222", "--events-key=" + testEventsKey, "--events-key-file=/nonexistent"}, "not both"},
		{"external NATS without a key, risk accepted", []string{"--nats-url=nats://127.0.0.1:4222", "--nats-namespace=apptestinsecure", "--insecure-no-auth"}, ""},
		{"loopback NATS with a key", []string{"--nats-url=nats://127.0.0.1:4222", "--nats-namespace=apptestkey", "--events-key=" + testEventsKey}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := newMemoryApp(t, tc.args...)
			if err == nil {
				t.Cleanup(func() {
					if _, js, err := a.NATS(context.Background()); err == nil {
						_ = js.DeleteStream(context.Background(), a.EventNames().Stream)
					}
				})
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("New: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("New: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

// The embedded NATS's events key is created once in the data directory, readable by its owner
// only, and read back by the next process.
func TestEmbeddedEventsKeyPersists(t *testing.T) {
	dir := t.TempDir()
	a := &App{cfg: Config{}, log: slog.New(slog.DiscardHandler)}
	a.cfg.DataDir = dir
	k1, err := a.EventKeys()
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "events.key"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("events.key mode %v, want 0600", fi.Mode().Perm())
	}
	b := &App{cfg: a.cfg, log: a.log}
	k2, err := b.EventKeys()
	if err != nil {
		t.Fatal(err)
	}
	if k1.Insecure() || k2.Insecure() {
		t.Fatal("an insecure keyring for the embedded NATS")
	}
	msg := &nats.Msg{Subject: "hermes.turn.finished.alice", Data: []byte("x")}
	k1.Sign(msg, time.Now())
	if err := k2.Verify(msg.Subject, msg.Header, msg.Data, time.Now()); err != nil {
		t.Errorf("the next process does not verify the first one's events: %v", err)
	}
}
