// Package cluster runs Hermes the way a team runs it in production, on one machine: each target
// its own `hermes serve --target=<service>` process on a loopback port, configured only by the
// HERMES_ environment variables (README "Configuration"), talking to each other over gRPC and to real Redis and NATS
// servers. It is test infrastructure, shared by the multi-process tests (test/multiprocess) and
// the load generator (bench/load): it builds the binary, starts and kills processes (in their
// own process groups), keeps each process's log for failure messages, waits for
// grpc.health.v1 SERVING, and runs a dedicated redis-server that can be killed and restarted.
package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/hermes-agent/hermes/internal/backoff"
	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// The five targets, in the order they are started.
var Targets = []string{"session", "tools", "mcpgateway", "memory", "orchestrator"}

// ServiceName is the gRPC service (and health check name) of each target.
var ServiceName = map[string]string{
	"session":      sessionv1.SessionService_ServiceDesc.ServiceName,
	"tools":        toolsv1.ToolService_ServiceDesc.ServiceName,
	"mcpgateway":   mcpgatewayv1.MCPGatewayService_ServiceDesc.ServiceName,
	"memory":       memoryv1.MemoryService_ServiceDesc.ServiceName,
	"orchestrator": orchestratorv1.OrchestratorService_ServiceDesc.ServiceName,
}

// RepoRoot finds the module root (the directory with go.mod) from the working directory up.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Build compiles ./cmd/hermes into dir and returns the binary's path.
func Build(ctx context.Context, dir string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "hermes")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/hermes")
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/hermes: %w\n%s", err, out.String())
	}
	return bin, nil
}

// handed are the ports FreePort gave out in this process. A port is bound only later by the
// process it was handed to, so until then it looks free: without this record two processes of
// one cluster (say memory's gRPC port and tools' metrics port) could be handed the same one.
var handed struct {
	mu    sync.Mutex
	ports map[int]bool // guarded by mu
}

// FreePort returns a loopback port nothing listens on right now and that this process has not
// handed out before. The port is handed to a process that binds it later, so it is taken below
// Linux's ephemeral range (32768–60999): ports that other tests get from listening on :0 come
// from that range, and could otherwise be taken in between.
func FreePort() (int, error) {
	handed.mu.Lock()
	defer handed.mu.Unlock()
	if handed.ports == nil {
		handed.ports = map[int]bool{}
	}
	for range 200 {
		port := 20000 + mathrand.IntN(12000)
		if handed.ports[port] {
			continue
		}
		lis, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		_ = lis.Close()
		handed.ports[port] = true
		return port, nil
	}
	return 0, errors.New("no free port in 20000-31999")
}

// FreeAddr returns 127.0.0.1:<a free port>.
func FreeAddr() (string, error) {
	p, err := FreePort()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", p), nil
}

// Process is one `hermes serve` process. Its address stays the same across restarts, so the
// other processes (configured with it) find it again.
type Process struct {
	// Name identifies the process ("memory", "orchestrator-2", "all").
	Name string
	// Target is the --target value.
	Target string
	// Addr is the gRPC address.
	Addr string
	// MetricsAddr serves Prometheus /metrics.
	MetricsAddr string
	// PprofAddr serves Go's profiler under /debug/pprof/ when the process was started with one
	// (Options.Profile); empty otherwise.
	PprofAddr string
	// LogPath is the file receiving the process's stdout and stderr (appended across restarts).
	LogPath string
	// HealthCreds, when set before the first health check, replace the health client's plaintext
	// transport (a process serving TLS, one that requires a client certificate).
	HealthCreds credentials.TransportCredentials

	bin  string
	args []string
	env  []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	exit   error
	starts int
	health *grpc.ClientConn
}

// NewProcess prepares (does not start) a process running `bin serve --target=target` with env
// (a list of KEY=VALUE added to a clean copy of this process's environment: every HERMES_*,
// OTEL_* and OPENAI_* variable of the caller is dropped, so a developer's settings do not leak
// in). HERMES_LISTEN and HERMES_METRICS_LISTEN are set from addr and metricsAddr.
func NewProcess(bin, name, target, addr, metricsAddr, logPath string, env []string) *Process {
	full := cleanEnviron()
	full = append(full, "HERMES_LISTEN="+addr, "HERMES_METRICS_LISTEN="+metricsAddr)
	full = append(full, env...)
	return &Process{
		Name: name, Target: target, Addr: addr, MetricsAddr: metricsAddr, LogPath: logPath,
		bin: bin, args: []string{"serve", "--target=" + target}, env: full,
	}
}

func cleanEnviron() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "HERMES_") || strings.HasPrefix(k, "OTEL_") || strings.HasPrefix(k, "OPENAI_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// Env returns the variables the process runs with that Hermes reads (HERMES_*, OTEL_*).
func (p *Process) Env() []string {
	var out []string
	for _, kv := range p.env {
		if strings.HasPrefix(kv, "HERMES_") || strings.HasPrefix(kv, "OTEL_") {
			out = append(out, kv)
		}
	}
	return out
}

// Start starts the process; it does not wait for it to serve (see WaitServing).
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !closed(p.done) {
		return fmt.Errorf("%s is already running (pid %d)", p.Name, p.cmd.Process.Pid)
	}
	logf, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	p.starts++
	fmt.Fprintf(logf, "=== %s start #%d: %s %s\n", time.Now().Format(time.RFC3339Nano), p.starts, p.bin, strings.Join(p.args, " "))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.exit = cmd, done, nil
	go func() {
		err := cmd.Wait()
		_ = logf.Close()
		p.mu.Lock()
		p.exit = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func closed(c chan struct{}) bool {
	if c == nil {
		return true
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Pid is the running process's id, 0 when it is not running.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || closed(p.done) {
		return 0
	}
	return p.cmd.Process.Pid
}

// Running reports whether the process is running.
func (p *Process) Running() bool { return p.Pid() != 0 }

// Exited returns the exit error when the process has ended, and whether it has.
func (p *Process) Exited() (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false, nil
	}
	if closed(p.done) {
		return true, p.exit
	}
	return false, nil
}

// Kill sends SIGKILL to the process group (kill -9: no shutdown, no drain) and waits for it.
func (p *Process) Kill() error { return p.signal(syscall.SIGKILL, 10*time.Second) }

// Stop sends SIGTERM (graceful shutdown) and waits up to timeout, then kills the group.
func (p *Process) Stop(timeout time.Duration) error {
	if err := p.signal(syscall.SIGTERM, timeout); err == nil {
		return nil
	}
	return p.Kill()
}

func (p *Process) signal(sig syscall.Signal, wait time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || closed(done) {
		return nil
	}
	// The negative pid signals the whole process group (Setpgid), so nothing it started stays.
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	select {
	case <-done:
		return nil
	case <-time.After(wait):
		return fmt.Errorf("%s did not exit within %s of %s", p.Name, wait, sig)
	}
}

// Restart starts a stopped or killed process again.
func (p *Process) Restart() error {
	if err := p.Kill(); err != nil {
		return err
	}
	return p.Start()
}

// healthClient returns a health client of the process (one connection, reused across restarts;
// gRPC reconnects by itself).
func (p *Process) healthClient() (healthpb.HealthClient, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.health == nil {
		creds := p.HealthCreds
		if creds == nil {
			creds = insecure.NewCredentials()
		}
		c, err := grpc.NewClient(p.Addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			return nil, err
		}
		p.health = c
	}
	return healthpb.NewHealthClient(p.health), nil
}

// Health returns the health status the process reports for service ("" for the process).
func (p *Process) Health(ctx context.Context, service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	hc, err := p.healthClient()
	if err != nil {
		return 0, err
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := hc.Check(cctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return 0, err
	}
	return resp.GetStatus(), nil
}

// pollHealth spaces the health checks of WaitHealth.
var pollHealth = backoff.Policy{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond, Jitter: 0.2}

// WaitHealth waits until the process reports want for every service, failing early when the
// process exits.
func (p *Process) WaitHealth(ctx context.Context, want healthpb.HealthCheckResponse_ServingStatus, timeout time.Duration, services ...string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, svc := range services {
		var last string
		var exited error
		ok := backoff.Until(ctx, pollHealth, func() bool {
			st, err := p.Health(ctx, svc)
			if err == nil && st == want {
				return true
			}
			if err != nil {
				last = err.Error()
			} else {
				last = st.String()
			}
			if ok, exitErr := p.Exited(); ok {
				exited = fmt.Errorf("%s exited (%v) before %s was %s", p.Name, exitErr, svc, want)
				return true
			}
			return false
		})
		switch {
		case exited != nil:
			return exited
		case !ok:
			return fmt.Errorf("%s: %s is not %s after %s (last: %s)", p.Name, svc, want, timeout, last)
		}
	}
	return nil
}

// Services returns the health names of the process's services.
func (p *Process) Services() []string {
	if p.Target == "all" {
		var out []string
		for _, t := range Targets {
			out = append(out, ServiceName[t])
		}
		return out
	}
	var out []string
	for _, t := range strings.Split(p.Target, ",") {
		out = append(out, ServiceName[t])
	}
	return out
}

// WaitServing waits until every service of the process is SERVING.
func (p *Process) WaitServing(ctx context.Context, timeout time.Duration) error {
	return p.WaitHealth(ctx, healthpb.HealthCheckResponse_SERVING, timeout, p.Services()...)
}

// Log returns the last max bytes of the process's log.
func (p *Process) Log(max int) string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	if len(data) > max {
		data = append([]byte("…"), data[len(data)-max:]...)
	}
	return string(data)
}

// Close kills the process and closes its health connection.
func (p *Process) Close() {
	_ = p.Kill()
	p.mu.Lock()
	if p.health != nil {
		_ = p.health.Close()
		p.health = nil
	}
	p.mu.Unlock()
}
