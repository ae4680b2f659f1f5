package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hermes-agent/hermes/internal/backoff"
	"github.com/redis/go-redis/v9"
)

// Redis is a redis-server of its own, on a free loopback port, with its data in a directory and
// an append-only file synced on every write (appendfsync always): killed with SIGKILL and started
// again, it has every write it acknowledged. It is what the Redis fault is injected into; the
// shared 127.0.0.1:6379 that other test packages use is never restarted.
type Redis struct {
	Port int
	Dir  string
	// AppendFsync is the append-only file's sync policy (always, everysec, no).
	AppendFsync string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// StartRedis starts a dedicated redis-server with its data in dir, every write synced.
func StartRedis(dir string) (*Redis, error) { return StartRedisFsync(dir, "always") }

// StartRedisFsync starts a dedicated redis-server whose append-only file is synced by policy:
// "always" for the fault tests, "everysec" as deploy/k8s runs it.
func StartRedisFsync(dir, policy string) (*Redis, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	r := &Redis{Port: port, Dir: dir, AppendFsync: policy}
	if err := r.Start(); err != nil {
		return nil, err
	}
	return r, nil
}

// URL is the value for HERMES_REDIS_URL.
func (r *Redis) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.Port) }

// Addr is host:port.
func (r *Redis) Addr() string { return fmt.Sprintf("127.0.0.1:%d", r.Port) }

// Start starts the server (again) on its port and waits until it answers PING.
func (r *Redis) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil && !closed(r.done) {
		return nil
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("redis-server is not installed (scripts/ensure-backends.sh installs it): %w", err)
	}
	if err := os.MkdirAll(r.Dir, 0o750); err != nil {
		return err
	}
	cmd := exec.Command(bin,
		"--port", fmt.Sprint(r.Port), "--bind", "127.0.0.1", "--dir", r.Dir,
		"--appendonly", "yes", "--appendfsync", r.AppendFsync, "--save", "",
		"--daemonize", "no", "--logfile", filepath.Join(r.Dir, "redis.log"),
	)
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	r.cmd, r.done = cmd, done

	rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1})
	defer func() { _ = rdb.Close() }()
	wctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	backoff.Until(wctx, pollHealth, func() bool {
		ctx, cancel := context.WithTimeout(wctx, time.Second)
		defer cancel()
		err = rdb.Ping(ctx).Err()
		return err == nil || closed(done)
	})
	switch {
	case err == nil:
		return nil
	case closed(done):
		log, _ := os.ReadFile(filepath.Join(r.Dir, "redis.log"))
		return fmt.Errorf("redis-server on port %d exited: %s", r.Port, log)
	default:
		return fmt.Errorf("redis-server on port %d does not answer: %w", r.Port, err)
	}
}

// Pid is the server's process id, 0 when it is not running.
func (r *Redis) Pid() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil || closed(r.done) {
		return 0
	}
	return r.cmd.Process.Pid
}

// Kill stops the server with SIGKILL (no shutdown save; the AOF has every acknowledged write).
func (r *Redis) Kill() {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.mu.Unlock()
	if cmd == nil || closed(done) {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// Close kills the server.
func (r *Redis) Close() { r.Kill() }
