package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/hermes-agent/hermes/internal/testenv"
)

// TestMicroservicesTwoOrchestrators runs the load generator briefly the way bench/README.md
// does — five processes plus a second orchestrator, real Redis and NATS — and checks that turns
// complete on both replicas without failures, so the recorded command keeps working.
func TestMicroservicesTwoOrchestrators(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six processes")
	}
	var out bytes.Buffer
	res, err := run(context.Background(), config{
		mode: "microservices", orchestrators: 2, sessions: 4,
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
	if len(res.perAddr) != 2 {
		t.Errorf("turns per orchestrator %v: want turns on both replicas", res.perAddr)
	}
	// Five targets and the second orchestrator, each read before and after the window.
	if len(res.cpu) != 6 {
		t.Errorf("CPU figures for %d processes (%v), want 6: some /metrics was not read", len(res.cpu), res.cpu)
	}
	for name, cpu := range res.cpu {
		if cpu <= 0 && name != "mcpgateway" {
			t.Errorf("%s used no CPU in the window: its /metrics was not read", name)
		}
	}
}
