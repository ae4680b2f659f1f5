package mcpgateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxStdioLine bounds one line a stdio server writes, as the SDK's own stdio transport does.
const maxStdioLine = mcp.DefaultMaxLineLength

// stdioTransport runs a stdio server as the SDK's CommandTransport does (stdin/stdout pipes;
// closing stdin, then SIGTERM, then SIGKILL to stop it), with two differences: a line on stdout
// that is not JSON (a banner, a stray print) is logged and skipped, as the TypeScript client
// does, instead of ending the connection; and responses to the gateway's own requests (see
// side) are taken out of the stream before the SDK reads it.
type stdioTransport struct {
	cmd   *exec.Cmd
	grace time.Duration
	log   *slog.Logger
	side  *stdioSide
}

// Connect implements mcp.Transport.
func (t *stdioTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	stdout, err := t.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := t.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := t.cmd.Start(); err != nil {
		return nil, err
	}
	w := &procStdin{cmd: t.cmd, stdin: stdin, grace: t.grace}
	t.side.w = w
	r := &lineFilter{r: bufio.NewReaderSize(stdout, 64<<10), log: t.log, side: t.side}
	return (&mcp.IOTransport{Reader: r, Writer: w, MaxLineLength: -1}).Connect(ctx)
}

// lineFilter passes the JSON lines of a server's stdout on and drops the rest.
type lineFilter struct {
	r       *bufio.Reader
	log     *slog.Logger
	side    *stdioSide
	pending []byte // the rest of the current line, not yet read
	skipped int    // non-JSON lines so far, for the log
}

// Read implements io.Reader.
func (f *lineFilter) Read(p []byte) (int, error) {
	for len(f.pending) == 0 {
		line, err := f.readLine()
		if err != nil {
			f.side.fail(err)
			return 0, err
		}
		trimmed := bytes.TrimSpace(line)
		switch {
		case len(trimmed) == 0:
			continue
		case trimmed[0] != '{' && trimmed[0] != '[':
			f.skipped++
			if f.skipped <= 10 {
				f.log.Warn("MCP server wrote a line that is not JSON-RPC to stdout; skipped", "line", abbreviate(string(trimmed), 200))
			}
			continue
		case f.side.take(trimmed):
			continue
		}
		f.pending = append(trimmed, '\n')
	}
	n := copy(p, f.pending)
	f.pending = f.pending[n:]
	return n, nil
}

// readLine reads one line, at most maxStdioLine bytes.
func (f *lineFilter) readLine() ([]byte, error) {
	var line []byte
	for {
		part, err := f.r.ReadSlice('\n')
		if len(line)+len(part) > maxStdioLine {
			return nil, fmt.Errorf("the server wrote a line longer than %d bytes", maxStdioLine)
		}
		switch {
		case err == nil && line == nil:
			return bytes.Clone(part), nil
		case err == nil:
			return append(line, part...), nil
		case errors.Is(err, bufio.ErrBufferFull):
			line = append(line, part...)
		case errors.Is(err, io.EOF) && len(line)+len(part) > 0:
			return append(line, part...), nil
		default:
			return nil, err
		}
	}
}

// Close implements io.Closer: the connection is closed through stdin, not stdout.
func (f *lineFilter) Close() error { return nil }

// procStdin writes to a server's stdin; each Write is one whole message. Close stops the server
// as the SDK does: stdin closed, then SIGTERM after the grace period, then SIGKILL.
type procStdin struct {
	cmd   *exec.Cmd
	grace time.Duration

	mu    sync.Mutex // guards stdin writes: the SDK's and the side channel's
	stdin io.WriteCloser
}

func (w *procStdin) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stdin.Write(p)
}

func (w *procStdin) Close() error {
	w.mu.Lock()
	err := w.stdin.Close()
	w.mu.Unlock()
	if err != nil {
		return fmt.Errorf("closing stdin: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- w.cmd.Wait() }()
	wait := func() (error, bool) {
		t := time.NewTimer(w.grace)
		defer t.Stop()
		select {
		case err := <-exited:
			return err, true
		case <-t.C:
			return nil, false
		}
	}
	if err, ok := wait(); ok {
		return err
	}
	if w.cmd.Process.Signal(syscall.SIGTERM) == nil {
		if err, ok := wait(); ok {
			return err
		}
	}
	_ = w.cmd.Process.Kill()
	if err, ok := wait(); ok {
		return err
	}
	return errors.New("the server process does not exit")
}
