package app

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net/http"
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
