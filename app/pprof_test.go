package app

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"testing"
)

// TestPprofListen: the profiler is off by default and serves /debug/pprof/ with the flag.
func TestPprofListen(t *testing.T) {
	for _, tc := range []struct {
		args []string
		on   bool
	}{{nil, false}, {[]string{"--pprof-listen=127.0.0.1:0"}, true}} {
		var cfg Config
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		cfg.RegisterFlags(fs)
		args := append([]string{"--target=session", "--listen=127.0.0.1:0", "--data-dir=" + t.TempDir()}, tc.args...)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		a, err := New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		if (a.PprofAddr() != "") != tc.on {
			t.Errorf("args %v: profiler address %q", tc.args, a.PprofAddr())
		}
		if tc.on {
			resp, err := http.Get("http://" + a.PprofAddr() + "/debug/pprof/goroutine?debug=1")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine profile") {
				t.Errorf("profile: %d %.200s", resp.StatusCode, body)
			}
		}
		_ = a.Stop()
	}
}

// TestPprofContention: --pprof-mutex-fraction and --pprof-block-rate turn the contention
// profiles on while the profiler serves, and off again when the process stops; negative
// rates are refused.
func TestPprofContention(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		fraction int // the mutex profile's fraction while running
		wantErr  bool
	}{
		{args: []string{"--pprof-listen=127.0.0.1:0"}, fraction: 0},
		{args: []string{"--pprof-listen=127.0.0.1:0", "--pprof-mutex-fraction=5", "--pprof-block-rate=1000"}, fraction: 5},
		{args: []string{"--pprof-mutex-fraction=5"}, fraction: 0}, // no profiler: nothing set
		{args: []string{"--pprof-listen=127.0.0.1:0", "--pprof-block-rate=-1"}, wantErr: true},
	} {
		var cfg Config
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		cfg.RegisterFlags(fs)
		args := append([]string{"--target=session", "--listen=127.0.0.1:0", "--data-dir=" + t.TempDir()}, tc.args...)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		a, err := New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if (err != nil) != tc.wantErr {
			t.Fatalf("args %v: error %v, want one: %v", tc.args, err, tc.wantErr)
		}
		if err != nil {
			continue
		}
		if got := runtime.SetMutexProfileFraction(-1); got != tc.fraction {
			t.Errorf("args %v: mutex profile fraction %d while running, want %d", tc.args, got, tc.fraction)
		}
		if a.PprofAddr() != "" {
			for _, p := range []string{"block", "mutex"} {
				resp, err := http.Get("http://" + a.PprofAddr() + "/debug/pprof/" + p + "?debug=1")
				if err != nil {
					t.Fatal(err)
				}
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("args %v: %s profile: %d", tc.args, p, resp.StatusCode)
				}
			}
		}
		_ = a.Stop()
		if got := runtime.SetMutexProfileFraction(-1); got != 0 {
			t.Errorf("args %v: mutex profile fraction %d after stop, want 0", tc.args, got)
		}
	}
}
