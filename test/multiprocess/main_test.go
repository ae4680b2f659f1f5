// Package multiprocess runs Hermes in microservices mode on this machine — five
// `hermes serve --target=<service>` processes on loopback ports, configured only by
// environment variables, with real Redis and NATS JetStream — and checks the article's
// restaurant example across them, one trace across the services, the metrics endpoint, health
// that follows the backends, and three faults (the memory process killed, Redis restarted, an
// MCP server killed) with nothing lost.
package multiprocess

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/hermes-agent/hermes/test/multiprocess/cluster"
)

// hermesBin is the binary built once for the package's tests.
var hermesBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "hermes-multiprocess-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	hermesBin, err = cluster.Build(ctx, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "multiprocess tests: building the hermes binary:", err)
		return 1
	}
	return m.Run()
}
