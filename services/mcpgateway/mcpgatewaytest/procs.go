package mcpgatewaytest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/hermes-agent/hermes/internal/testenv"
)

// StdioAllow is the operator's stdio allowlist of the tests: node (the reference servers) and
// the test binary itself (the helper server).
func StdioAllow() []string {
	var out []string
	if p, err := exec.LookPath("node"); err == nil {
		out = append(out, p)
	}
	if p, err := os.Executable(); err == nil {
		out = append(out, p)
	}
	return out
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// StartEverythingHTTP runs the everything server's Streamable HTTP transport on port and waits
// until it accepts connections.
func StartEverythingHTTP(t testing.TB, port int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(Node(t), NodeScript(t, "@modelcontextprotocol/server-everything/dist/index.js"), "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
	if testing.Verbose() {
		cmd.Stderr = os.Stderr
	}
	StartListening(t, cmd, port)
	return cmd
}

// StartListening starts a server process, kills it at the end of the test, and waits until it
// accepts connections on port.
func StartListening(t testing.TB, cmd *exec.Cmd, port int) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	testenv.WaitFor(t, 60*time.Second, fmt.Sprintf("%s to listen on port %d", cmd.Path, port), func() bool {
		select {
		case <-done:
			t.Fatalf("%s on port %d exited early", cmd.Path, port)
		default:
		}
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
}
