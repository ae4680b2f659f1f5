package main

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hermes-agent/hermes/internal/testenv"
	"github.com/hermes-agent/hermes/test/multiprocess/cluster"
)

// TestMicroservicesReplicas runs the load generator briefly the way bench/README.md does — the
// five processes with orchestrator (and memory) replicas — and checks that turns complete on
// every orchestrator replica without failures, and that every process, Redis and NATS
// included, has a CPU figure, so the recorded commands keep working.
func TestMicroservicesReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six to nine processes")
	}
	bin, err := cluster.Build(t.Context(), t.TempDir()) // once, not once per run
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		orchestrators, memories int
		ownBackends             bool
	}{
		// The machine's shared Redis (the tests' DB) and NATS.
		{orchestrators: 2, memories: 1},
		// Redis and NATS of the run's own; four orchestrators over two memory replicas.
		{orchestrators: 4, memories: 2, ownBackends: true},
	} {
		t.Run(fmt.Sprintf("orchestrators=%d,memories=%d,own=%t", tc.orchestrators, tc.memories, tc.ownBackends), func(t *testing.T) {
			var out bytes.Buffer
			res, err := run(context.Background(), config{
				mode: "microservices", bin: bin, orchestrators: tc.orchestrators, memories: tc.memories,
				ownBackends: tc.ownBackends, sessions: 2 * tc.orchestrators,
				duration: 2 * time.Second, warmup: 500 * time.Millisecond,
				redisURL: testenv.RedisURL(), natsURL: "nats://127.0.0.1:4222",
			}, &out)
			t.Log(out.String())
			if err != nil {
				t.Fatal(err)
			}
			if len(res.failures) > 0 {
				t.Errorf("failures: %v, for example %v", res.failures, res.example)
			}
			if len(res.latencies) == 0 {
				t.Fatal("no turn completed")
			}
			// Sessions go round-robin over the replicas' addresses: every replica runs turns.
			if len(res.perAddr) != tc.orchestrators {
				t.Errorf("turns per orchestrator %v: want turns on all %d replicas", res.perAddr, tc.orchestrators)
			}
			for addr, n := range res.perAddr {
				if n == 0 {
					t.Errorf("orchestrator %s ran no turn", addr)
				}
			}
			// Session, tools, gateway, the replicas, Redis and NATS, each read before and
			// after the window.
			want := 3 + tc.orchestrators + tc.memories + 2
			if len(res.cpu) != want {
				t.Errorf("CPU figures for %d processes (%v), want %d: some process was not read", len(res.cpu), res.cpu, want)
			}
			for name, cpu := range res.cpu {
				if cpu <= 0 && name != "mcpgateway" {
					t.Errorf("%s used no CPU in the window: it was not read, or did no work", name)
				}
			}
		})
	}
}
