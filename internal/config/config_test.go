package config

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

type settings struct {
	Listen  string
	Redis   string
	Window  int
	Timeout time.Duration
	Tags    string
}

func newFS(s *settings) *flag.FlagSet {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.String("config", "", "")
	fs.StringVar(&s.Listen, "listen", "127.0.0.1:7070", "")
	fs.StringVar(&s.Redis, "redis-url", "", "")
	fs.IntVar(&s.Window, "session.window-turns", 12, "")
	fs.DurationVar(&s.Timeout, "tools.default-timeout", 10*time.Second, "")
	fs.StringVar(&s.Tags, "tools.always-include", "", "")
	return fs
}

func TestEnvName(t *testing.T) {
	for in, want := range map[string]string{
		"listen":                "HERMES_LISTEN",
		"redis-url":             "HERMES_REDIS_URL",
		"session-addr":          "HERMES_SESSION_ADDR",
		"memory.min-similarity": "HERMES_MEMORY_MIN_SIMILARITY",
	} {
		if got := EnvName(in); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "hermes.yaml")
	if err := os.WriteFile(file, []byte("listen: 0.0.0.0:1\nredis-url: redis://file\nsession:\n  window-turns: 20\ntools:\n  default-timeout: 3s\n  always-include: [a, b]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want settings
	}{
		{"defaults", nil, nil, settings{"127.0.0.1:7070", "", 12, 10 * time.Second, ""}},
		{"file", []string{"--config", file}, nil, settings{"0.0.0.0:1", "redis://file", 20, 3 * time.Second, "a,b"}},
		{"env beats file", []string{"--config", file}, map[string]string{"HERMES_REDIS_URL": "redis://env", "HERMES_SESSION_WINDOW_TURNS": "5"}, settings{"0.0.0.0:1", "redis://env", 5, 3 * time.Second, "a,b"}},
		{"flag beats env", []string{"--config", file, "--redis-url", "redis://flag"}, map[string]string{"HERMES_REDIS_URL": "redis://env"}, settings{"0.0.0.0:1", "redis://flag", 20, 3 * time.Second, "a,b"}},
		{"config path from env", nil, map[string]string{"HERMES_CONFIG": file}, settings{"0.0.0.0:1", "redis://file", 20, 3 * time.Second, "a,b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var s settings
			fs := newFS(&s)
			if err := Load(fs, tc.args, func(k string) string { return tc.env[k] }, "config"); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, s); diff != "" {
				t.Errorf("settings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	dir := t.TempDir()
	unknown := filepath.Join(dir, "unknown.yaml")
	_ = os.WriteFile(unknown, []byte("lisen: x\n"), 0o600)
	broken := filepath.Join(dir, "broken.yaml")
	_ = os.WriteFile(broken, []byte("listen: [\n"), 0o600)
	tests := []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"unknown flag", []string{"--nope"}, nil},
		{"bad env value", nil, map[string]string{"HERMES_SESSION_WINDOW_TURNS": "many"}},
		{"unknown file key", []string{"--config", unknown}, nil},
		{"broken file", []string{"--config", broken}, nil},
		{"missing file", []string{"--config", filepath.Join(dir, "absent.yaml")}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var s settings
			if err := Load(newFS(&s), tc.args, func(k string) string { return tc.env[k] }, "config"); err == nil {
				t.Error("Load succeeded")
			}
		})
	}
}
