package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/qdranttest"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	"github.com/hermes-agent/hermes/test/multiprocess/cluster"
)

// The systems, in the order of the report.
const (
	hermesMono  = "hermes-mono"
	hermesMicro = "hermes-micro"
	adkMemory   = "adk-memory"
	adkSQLite   = "adk-sqlite"
	// The same two Hermes systems run from the -baseline binary, to compare two builds in one
	// run (the machine's speed drifts too much between runs).
	baseMono  = "base-mono"
	baseMicro = "base-micro"
)

var allSystems = []string{hermesMono, hermesMicro, adkMemory, adkSQLite}

var systemTitle = map[string]string{
	hermesMono:  "Hermes monolithic (`hermes serve`)",
	hermesMicro: "Hermes microservices (5 processes, Redis, NATS)",
	adkMemory:   "adk-go, in-memory sessions",
	adkSQLite:   "adk-go, SQLite sessions (durable)",
	baseMono:    "Hermes monolithic, -baseline binary",
	baseMicro:   "Hermes microservices, -baseline binary",
}

// system is one running system under test, driven from the harness.
type system interface {
	newSession(ctx context.Context, user string) (string, error)
	// turn runs one turn and returns when its final answer has arrived.
	turn(ctx context.Context, user, session, text string) error
	// procs are the processes to measure.
	procs() []proc
	close()
}

// env is what every system is started with.
type env struct {
	hermesBin string
	// baselineBin is the -baseline binary, for base-mono and base-micro.
	baselineBin string
	adkBin      string
	modelURL    string
	dir         string // a fresh directory for this system's data and logs
	redisURL    string
	natsURL     string
	// strace, when set, runs the system's server process under strace writing to this file.
	strace string
	// env is added to Hermes's environment (every process of it).
	env []string
}

func startSystem(ctx context.Context, kind string, e env) (system, error) {
	switch kind {
	case hermesMono:
		return startHermesMono(ctx, e)
	case hermesMicro:
		return startHermesMicro(ctx, e)
	case baseMono:
		e.hermesBin = e.baselineBin
		return startHermesMono(ctx, e)
	case baseMicro:
		e.hermesBin = e.baselineBin
		return startHermesMicro(ctx, e)
	case adkMemory:
		return startADK(ctx, "memory", e)
	case adkSQLite:
		return startADK(ctx, "sqlite", e)
	}
	return nil, fmt.Errorf("system %q: want one of %s", kind, strings.Join(allSystems, ", "))
}

// hermes drives Hermes over gRPC: SessionService.CreateSession and OrchestratorService.RunTurn.
type hermes struct {
	conns   []*grpc.ClientConn
	session sessionv1.SessionServiceClient
	orch    orchestratorv1.OrchestratorServiceClient
	ps      []proc
	closers []func()
	// metrics is the monolith's Prometheus address (the Go runtime's allocation counters).
	metrics string
}

func newHermesClient(sessionAddr, orchAddr string) (*hermes, error) {
	h := &hermes{}
	for _, a := range []string{sessionAddr, orchAddr} {
		c, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			h.close()
			return nil, err
		}
		h.conns = append(h.conns, c)
	}
	h.session = sessionv1.NewSessionServiceClient(h.conns[0])
	h.orch = orchestratorv1.NewOrchestratorServiceClient(h.conns[1])
	return h, nil
}

func startHermesMono(ctx context.Context, e env) (system, error) {
	bin := e.hermesBin
	if e.strace != "" {
		var err error
		if bin, err = hermesUnderStrace(e.dir, e.hermesBin, e.strace); err != nil {
			return nil, err
		}
	}
	p, err := cluster.StartMonolith(ctx, bin, e.dir, e.modelURL, "scripted-peer", e.env)
	if err != nil {
		return nil, err
	}
	h, err := newHermesClient(p.Addr, p.Addr)
	if err != nil {
		p.Close()
		return nil, err
	}
	h.ps = []proc{{name: "hermes", pid: p.Pid()}}
	h.metrics = p.MetricsAddr
	// SIGTERM first: under strace, a SIGKILL would lose the trace's last lines.
	h.closers = append(h.closers, func() { _ = p.Stop(10 * time.Second); p.Close() })
	return h, nil
}

func startHermesMicro(ctx context.Context, e env) (system, error) {
	q, err := qdranttest.Start()
	if err != nil {
		return nil, err
	}
	id := strconv.FormatInt(time.Now().UnixNano(), 36)
	prefix, ns := "hermes-peer-"+id+":", "peer"+id
	cl, err := cluster.Start(ctx, cluster.Options{
		Binary: e.hermesBin, Dir: e.dir,
		RedisURL: e.redisURL, RedisPrefix: prefix,
		NATSURL: e.natsURL, NATSNamespace: ns,
		QdrantAddr:   q.Addr(),
		ModelBaseURL: e.modelURL, Model: "scripted-peer",
		Env: append([]string{"HERMES_MEMORY_QDRANT_COLLECTION=hermes_peer_" + id}, e.env...),
	})
	if err != nil {
		q.Close()
		return nil, err
	}
	cleanup := func() {
		cl.Close()
		cluster.RemoveBackendData(e.redisURL, prefix, e.natsURL, ns)
		q.Close()
	}
	h, err := newHermesClient(cl.Addr("session"), cl.Addr("orchestrator"))
	if err != nil {
		cleanup()
		return nil, err
	}
	h.closers = append(h.closers, cleanup)
	for _, p := range cl.Procs {
		h.ps = append(h.ps, proc{name: p.Name, pid: p.Pid()})
	}
	if pid := cluster.FindServer("redis-server", urlPort(e.redisURL, "6379")); pid != 0 {
		h.ps = append(h.ps, proc{name: "redis-server", pid: pid, shared: true})
	}
	if pid := cluster.FindServer("nats-server", urlPort(e.natsURL, "4222")); pid != 0 {
		h.ps = append(h.ps, proc{name: "nats-server", pid: pid, shared: true})
	}
	return h, nil
}

func urlPort(raw, def string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Port() == "" {
		return def
	}
	return u.Port()
}

func (h *hermes) newSession(ctx context.Context, user string) (string, error) {
	resp, err := h.session.CreateSession(ctx, &sessionv1.CreateSessionRequest{UserId: user, Title: "peer"})
	if err != nil {
		return "", fmt.Errorf("CreateSession: %w", err)
	}
	return resp.GetSession().GetId(), nil
}

// turn returns at TurnCompleted, so the next turn may be sent at once (the stream's end is not
// waited for).
func (h *hermes) turn(ctx context.Context, user, session, text string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := h.orch.RunTurn(ctx, &orchestratorv1.RunTurnRequest{SessionId: session, UserId: user, Text: text})
	if err != nil {
		return fmt.Errorf("RunTurn: %w", err)
	}
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return errors.New("RunTurn: the stream ended without TurnCompleted")
		}
		if err != nil {
			st := status.Convert(err)
			return fmt.Errorf("RunTurn: %s: %s", st.Code(), st.Message())
		}
		switch ev := msg.GetEvent().GetEvent().(type) {
		case *orchestratorv1.TurnEvent_Completed:
			return nil
		case *orchestratorv1.TurnEvent_Failed:
			return fmt.Errorf("TurnFailed %s: %s", ev.Failed.GetCode(), ev.Failed.GetMessage())
		}
	}
}

func (h *hermes) procs() []proc { return h.ps }

func (h *hermes) close() {
	for _, c := range h.conns {
		_ = c.Close()
	}
	for i := len(h.closers) - 1; i >= 0; i-- {
		h.closers[i]()
	}
}

// adk is the adk-go child process (adkpeer), driven over HTTP on loopback.
type adk struct {
	cmd  *exec.Cmd
	done chan struct{}
	base string
	hc   *http.Client
	pid  int
	log  string
}

func startADK(ctx context.Context, sessions string, e env) (system, error) {
	argv := []string{e.adkBin, "-sessions", sessions, "-data", filepath.Join(e.dir, "data"), "-model-url", e.modelURL}
	if e.strace != "" {
		argv = straceArgs(e.strace, argv...)
	}
	logPath := filepath.Join(e.dir, "adk.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		_ = logf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("start adk-go child: %w", err)
	}
	a := &adk{cmd: cmd, done: make(chan struct{}), pid: cmd.Process.Pid, log: logPath,
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 2 * time.Minute}}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
				addr <- v
			}
		}
	}()
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(a.done) }()
	select {
	case v := <-addr:
		a.base = "http://" + v
	case <-a.done:
		return nil, fmt.Errorf("adk-go child exited before serving: %s", tail(logPath))
	case <-time.After(60 * time.Second):
		a.close()
		return nil, fmt.Errorf("adk-go child did not serve within 60 s: %s", tail(logPath))
	case <-ctx.Done():
		a.close()
		return nil, ctx.Err()
	}
	return a, nil
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// adkRequest and adkResponse are adkpeer's JSON (its adkRequest and adkResponse).
type adkRequest struct {
	User    string `json:"user"`
	Session string `json:"session,omitempty"`
	Text    string `json:"text,omitempty"`
}

type adkResponse struct {
	Session string `json:"session"`
	Text    string `json:"text"`
}

func (a *adk) post(ctx context.Context, path string, req adkRequest) (adkResponse, error) {
	body, _ := json.Marshal(req)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, a.base+path, bytes.NewReader(body))
	if err != nil {
		return adkResponse{}, err
	}
	hr.Header.Set("Content-Type", "application/json")
	resp, err := a.hc.Do(hr)
	if err != nil {
		return adkResponse{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return adkResponse{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return adkResponse{}, fmt.Errorf("adk-go %s: %s: %s", path, resp.Status, strings.TrimSpace(string(data)))
	}
	var out adkResponse
	if err := json.Unmarshal(data, &out); err != nil {
		return adkResponse{}, fmt.Errorf("adk-go %s: %w", path, err)
	}
	return out, nil
}

func (a *adk) newSession(ctx context.Context, user string) (string, error) {
	r, err := a.post(ctx, "/session", adkRequest{User: user})
	return r.Session, err
}

func (a *adk) turn(ctx context.Context, user, session, text string) error {
	r, err := a.post(ctx, "/turn", adkRequest{User: user, Session: session, Text: text})
	if err == nil && !strings.HasPrefix(r.Text, "结果是 ") {
		err = fmt.Errorf("adk-go answered %q, not the calculator's result", r.Text)
	}
	return err
}

func (a *adk) procs() []proc { return []proc{{name: "adk-go", pid: a.pid}} }

// close stops the child with SIGTERM (strace writes its last lines), then SIGKILL.
func (a *adk) close() {
	a.hc.CloseIdleConnections()
	_ = syscall.Kill(-a.pid, syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-a.pid, syscall.SIGKILL)
		<-a.done
	}
}
