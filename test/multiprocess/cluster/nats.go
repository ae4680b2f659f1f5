package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hermes-agent/hermes/internal/events"
)

// NATS is a nats-server process of its own with JetStream, on a free loopback port, its store
// in a directory. A separate process, so its CPU time can be read from /proc (bench/load's
// -own-backends), and the race detector of a test binary does not run inside nats-server (whose
// own concurrency once failed a -race test run).
type NATS struct {
	Port int
	Dir  string

	cmd  *exec.Cmd
	done chan struct{}
}

// StartNATS starts nats-server -js with its store in dir and waits until JetStream answers.
func StartNATS(dir string) (*NATS, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	n := &NATS{Port: port, Dir: dir}
	if err := n.Start(); err != nil {
		return nil, err
	}
	return n, nil
}

// Start starts the server (again, after Stop or Close: the same port and store) and waits until
// JetStream answers.
func (n *NATS) Start() error {
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		return fmt.Errorf("nats-server is not installed (scripts/ensure-backends.sh installs it): %w", err)
	}
	logPath := filepath.Join(n.Dir, "nats.log")
	cmd := exec.Command(bin, "-a", "127.0.0.1", "-p", fmt.Sprint(n.Port), "-js", "-sd", n.Dir, "-l", logPath)
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start nats-server: %w", err)
	}
	n.cmd, n.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(n.done) }()

	deadline := time.Now().Add(15 * time.Second)
	for {
		err := n.ping()
		if err == nil {
			return nil
		}
		if closed(n.done) {
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("nats-server on port %d exited: %s", n.Port, log)
		}
		if time.Now().After(deadline) {
			n.Close()
			return fmt.Errorf("nats-server on port %d: JetStream does not answer: %w", n.Port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop shuts the server down cleanly (SIGTERM: JetStream's store is flushed) and waits for it.
func (n *NATS) Stop() {
	if n.cmd == nil || closed(n.done) {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.done:
	case <-time.After(10 * time.Second):
		n.Close()
	}
}

// ping connects and asks JetStream for the account's figures.
func (n *NATS) ping() error {
	nc, js, err := events.Connect(n.URL(), "hermes-cluster-ping", nil, nats.MaxReconnects(0))
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err
}

// URL is the value for HERMES_NATS_URL.
func (n *NATS) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.Port) }

// Pid is the server's process id, 0 when it has exited.
func (n *NATS) Pid() int {
	if closed(n.done) {
		return 0
	}
	return n.cmd.Process.Pid
}

// Close kills the server and waits for it.
func (n *NATS) Close() {
	if n.cmd == nil || closed(n.done) {
		return
	}
	_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	<-n.done
}
