package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hermes-agent/hermes/internal/events"
)

// Options configure a cluster of five (or more) processes.
type Options struct {
	// Binary is the hermes binary (see Build).
	Binary string
	// Dir receives the logs and data directories.
	Dir string

	// RedisURL, RedisPrefix: HERMES_REDIS_URL and HERMES_REDIS_PREFIX.
	RedisURL, RedisPrefix string
	// NATSURL, NATSNamespace: HERMES_NATS_URL and HERMES_NATS_NAMESPACE.
	NATSURL, NATSNamespace string
	// QdrantAddr is HERMES_QDRANT_ADDR.
	QdrantAddr string
	// ModelBaseURL and Model: HERMES_MODEL_BASE_URL and HERMES_MODEL.
	ModelBaseURL, Model string
	// OTLPEndpoint is OTEL_EXPORTER_OTLP_ENDPOINT; empty exports no traces.
	OTLPEndpoint string
	// Orchestrators is the number of orchestrator processes (replicas); 0 means 1.
	Orchestrators int
	// Memories is the number of memory processes (replicas); 0 means 1. The replicas share the
	// extraction work through JetStream (one durable consumer). Each orchestrator calls one
	// of them: orchestrator k (from 1) is given memory replica (k-1) mod Memories as
	// HERMES_MEMORY_ADDR, because a gRPC target names one host:port here (the replicas listen on
	// different loopback ports, which a dns:/// name cannot carry).
	Memories int
	// Profile gives every process a Go profiler (HERMES_PPROF_LISTEN, Process.PprofAddr).
	Profile bool
	// Env holds more KEY=VALUE settings for every process.
	Env []string
	// StartTimeout bounds the wait for SERVING; 0 means 60 s.
	StartTimeout time.Duration
}

// Cluster is a set of running processes, one per target (the orchestrator possibly several).
type Cluster struct {
	Opts  Options
	Procs []*Process
	addrs map[string]string
}

// Start starts session, tools, mcpgateway, memory and the orchestrator(s), each its own
// process, and waits until every one reports SERVING for its service. On failure everything is
// killed and the error carries the logs.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Orchestrators <= 0 {
		opts.Orchestrators = 1
	}
	if opts.Memories <= 0 {
		opts.Memories = 1
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 60 * time.Second
	}
	c := &Cluster{Opts: opts, addrs: map[string]string{}}
	type slot struct {
		name, target string
		replica      int // from 1
	}
	replicas := map[string]int{"orchestrator": opts.Orchestrators, "memory": opts.Memories}
	var slots []slot
	for _, t := range Targets {
		for i := 1; i <= max(replicas[t], 1); i++ {
			name := t
			if i > 1 {
				name = fmt.Sprintf("%s-%d", t, i)
			}
			slots = append(slots, slot{name, t, i})
		}
	}
	addrs := map[string]string{}
	metrics := map[string]string{}
	pprofs := map[string]string{}
	var memories []string
	for _, s := range slots {
		a, err := FreeAddr()
		if err != nil {
			return nil, err
		}
		m, err := FreeAddr()
		if err != nil {
			return nil, err
		}
		addrs[s.name], metrics[s.name] = a, m
		if opts.Profile {
			if pprofs[s.name], err = FreeAddr(); err != nil {
				return nil, err
			}
		}
		if _, ok := c.addrs[s.target]; !ok {
			c.addrs[s.target] = a
		}
		if s.target == "memory" {
			memories = append(memories, a)
		}
	}
	shared := c.sharedEnv()
	for _, s := range slots {
		data := filepath.Join(opts.Dir, "data", s.name)
		env := append(append([]string{}, shared...), "HERMES_DATA_DIR="+data)
		if s.target == "orchestrator" && len(memories) > 1 {
			// The later value of a repeated variable wins (os/exec).
			env = append(env, "HERMES_MEMORY_ADDR="+memories[(s.replica-1)%len(memories)])
		}
		if a := pprofs[s.name]; a != "" {
			env = append(env, "HERMES_PPROF_LISTEN="+a)
		}
		p := NewProcess(opts.Binary, s.name, s.target, addrs[s.name], metrics[s.name], filepath.Join(opts.Dir, s.name+".log"), env)
		p.PprofAddr = pprofs[s.name]
		c.Procs = append(c.Procs, p)
	}
	for _, p := range c.Procs {
		if err := p.Start(); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := c.WaitServing(ctx, opts.StartTimeout); err != nil {
		err = fmt.Errorf("%w\n%s", err, c.Logs(4000))
		c.Close()
		return nil, err
	}
	return c, nil
}

// sharedEnv is the configuration every process gets: the HERMES_ variables of the README.
func (c *Cluster) sharedEnv() []string {
	o := c.Opts
	env := []string{
		"HERMES_REDIS_URL=" + o.RedisURL,
		"HERMES_REDIS_PREFIX=" + o.RedisPrefix,
		"HERMES_NATS_URL=" + o.NATSURL,
		"HERMES_NATS_NAMESPACE=" + o.NATSNamespace,
		"HERMES_QDRANT_ADDR=" + o.QdrantAddr,
		"HERMES_MODEL_BASE_URL=" + o.ModelBaseURL,
		"HERMES_MODEL=" + o.Model,
		// The scripted model ignores the key; a real provider would need one.
		"HERMES_MODEL_API_KEY=unused-by-the-scripted-model",
		// The key that signs turn.finished, shared by the orchestrator and memory (Env may
		// replace it).
		"HERMES_EVENTS_KEY=" + eventsKey(),
	}
	for _, t := range Targets {
		env = append(env, "HERMES_"+strings.ToUpper(t)+"_ADDR="+c.addrs[t])
	}
	if o.OTLPEndpoint != "" {
		env = append(env, "OTEL_EXPORTER_OTLP_ENDPOINT="+o.OTLPEndpoint)
	}
	return append(env, o.Env...)
}

// WaitServing waits until every process reports SERVING for its services.
func (c *Cluster) WaitServing(ctx context.Context, timeout time.Duration) error {
	var wg sync.WaitGroup
	errs := make([]error, len(c.Procs))
	for i, p := range c.Procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.WaitServing(ctx, timeout)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Proc returns the process of that name ("memory", "orchestrator-2"), or nil.
func (c *Cluster) Proc(name string) *Process {
	for _, p := range c.Procs {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Addr is the gRPC address of a target's (first) process.
func (c *Cluster) Addr(target string) string { return c.addrs[target] }

// Addrs returns the addresses of every process of a target (the orchestrator or memory replicas).
func (c *Cluster) Addrs(target string) []string {
	var out []string
	for _, p := range c.Procs {
		if p.Target == target {
			out = append(out, p.Addr)
		}
	}
	return out
}

// Logs returns the tail of every process's log, max bytes each, with a header per process.
func (c *Cluster) Logs(max int) string {
	var b strings.Builder
	for _, p := range c.Procs {
		state := "running"
		if ok, err := p.Exited(); ok {
			state = fmt.Sprintf("exited: %v", err)
		}
		fmt.Fprintf(&b, "\n----- %s (%s, %s, %s) log %s -----\n%s", p.Name, p.Target, p.Addr, state, p.LogPath, p.Log(max))
	}
	return b.String()
}

// Close kills every process.
func (c *Cluster) Close() {
	var wg sync.WaitGroup
	for _, p := range c.Procs {
		wg.Add(1)
		go func() { defer wg.Done(); p.Close() }()
	}
	wg.Wait()
}

// StartMonolith starts one `hermes serve` (every target in one process, embedded NATS, stores
// and vector index in a data directory under dir) and waits until all five services serve.
func StartMonolith(ctx context.Context, bin, dir, modelBaseURL, model string, env []string) (*Process, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	maddr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data", "all")
	if err := os.MkdirAll(data, 0o750); err != nil {
		return nil, err
	}
	full := append([]string{
		"HERMES_DATA_DIR=" + data,
		"HERMES_MODEL_BASE_URL=" + modelBaseURL,
		"HERMES_MODEL=" + model,
		"HERMES_MODEL_API_KEY=unused-by-the-scripted-model",
	}, env...)
	p := NewProcess(bin, "all", "all", addr, maddr, filepath.Join(dir, "all.log"), full)
	if err := p.Start(); err != nil {
		return nil, err
	}
	if err := p.WaitServing(ctx, 60*time.Second); err != nil {
		err = fmt.Errorf("%w\n%s", err, p.Log(4000))
		p.Close()
		return nil, err
	}
	return p, nil
}

// eventsKey is a fresh events key for one cluster.
func eventsKey() string {
	key, err := events.RandomKey()
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return key
}
