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
	"time"
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
// profiles on while the profiler serves (also in a process whose embedded NATS server, which
// sets the block rate when it starts, runs), and off again when the process stops; negative
// rates are refused.
func TestPprofContention(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		fraction int  // the mutex profile's fraction while running
		blocks   bool // a blocking event is recorded while running
		wantErr  bool
	}{
		{args: []string{"--target=session", "--pprof-listen=127.0.0.1:0"}},
		// The block profile keeps what it recorded: the row with the embedded NATS server first.
		{args: []string{"--target=memory", "--model-base-url=http://127.0.0.1:9/v1", "--model=m", "--pprof-listen=127.0.0.1:0", "--pprof-mutex-fraction=5", "--pprof-block-rate=1"}, fraction: 5, blocks: true},
		{args: []string{"--target=session", "--pprof-listen=127.0.0.1:0", "--pprof-mutex-fraction=5", "--pprof-block-rate=1"}, fraction: 5, blocks: true},
		{args: []string{"--target=session", "--pprof-mutex-fraction=5"}}, // no profiler: nothing set
		{args: []string{"--target=session", "--pprof-listen=127.0.0.1:0", "--pprof-block-rate=-1"}, wantErr: true},
	} {
		var cfg Config
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		cfg.RegisterFlags(fs)
		args := append([]string{"--listen=127.0.0.1:0", "--data-dir=" + t.TempDir()}, tc.args...)
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
		// A receive from a timer's channel blocks until it fires: a blocking event.
		<-time.After(time.Millisecond)
		if a.PprofAddr() != "" {
			for _, p := range []string{"block", "mutex"} {
				resp, err := http.Get("http://" + a.PprofAddr() + "/debug/pprof/" + p + "?debug=1")
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("args %v: %s profile: %d", tc.args, p, resp.StatusCode)
				}
				if got := strings.Contains(string(body), "TestPprofContention"); p == "block" && got != tc.blocks {
					t.Errorf("args %v: the test's blocking event in the block profile: %v, want %v", tc.args, got, tc.blocks)
				}
			}
		}
		_ = a.Stop()
		runtime.SetBlockProfileRate(0) // a row without the flag must not see an earlier row's events
		if got := runtime.SetMutexProfileFraction(-1); got != 0 {
			t.Errorf("args %v: mutex profile fraction %d after stop, want 0", tc.args, got)
		}
	}
}
