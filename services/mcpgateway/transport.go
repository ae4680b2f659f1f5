package mcpgateway

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"
)

// connect starts the transport and runs the handshake.
func (c *serverConn) connect(pin string) (*live, error) {
	timeout, flag := c.connectTimeout()
	ctx, cancel := context.WithTimeout(c.ctx, timeout)
	defer cancel()
	defer c.reportProgress(timeout, flag)()
	t, cmd, side, err := c.transport()
	if err != nil {
		return nil, err
	}
	client := c.newClient()
	var opts *mcp.ClientSessionOptions
	if pin != "" {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: pin}
	}
	sess, err := client.Connect(ctx, t, opts)
	if err != nil {
		if cmd != nil && cmd.Process != nil {
			killProcessGroup(cmd.Process.Pid)
		}
		return nil, c.withStderr(c.timeoutError(ctx, fmt.Errorf("connect: %w", err), timeout, flag))
	}
	c.mu.Lock()
	c.connectedOnce = true
	c.mu.Unlock()
	l := &live{sess: sess, side: side}
	if cmd != nil && cmd.Process != nil {
		l.pid = cmd.Process.Pid
	}
	return l, nil
}

// newClient is the SDK client of a session with the server.
func (c *serverConn) newClient() *mcp.Client {
	client := mcp.NewClient(&mcp.Implementation{Name: "hermes", Version: c.g.version}, c.clientOptions())
	client.AddReceivingMiddleware(c.subscriptionAcks, c.nullMessages)
	if roots := c.roots(); len(roots) > 0 {
		client.AddRoots(roots...)
	}
	return client
}

// withStderr adds the last line a stdio server wrote to stderr, which usually says why it
// failed.
func (c *serverConn) withStderr(err error) error {
	if c.spec.GetStdio() == nil {
		return err
	}
	if line := c.stderr.lastLine(); line != "" {
		return fmt.Errorf("%w (stderr: %s)", err, abbreviate(line, 300))
	}
	return err
}

// transport builds the SDK transport and the side channel from the spec.
func (c *serverConn) transport() (mcp.Transport, *exec.Cmd, sideChannel, error) {
	if st := c.spec.GetStdio(); st != nil {
		env := make([]string, 0, len(st.Env)+2)
		for k, v := range st.Env {
			env = append(env, k+"="+v)
		}
		for _, k := range []string{"PATH", "HOME"} {
			if _, ok := st.Env[k]; !ok {
				if v := c.g.getenv(k); v != "" {
					env = append(env, k+"="+v)
				}
			}
		}
		sort.Strings(env)
		path := st.Env["PATH"]
		if path == "" {
			path = c.g.getenv("PATH")
		}
		bin, err := lookPath(st.Command, path, st.WorkingDir)
		if err != nil {
			return nil, nil, nil, err
		}
		// #nosec G204 -- the command passed the operator's stdio allowlist (powers.check) where the spec entered
		cmd := exec.Command(bin, st.Args...)
		cmd.Env = env // never nil: a nil Env would hand the server the gateway's whole environment
		cmd.Dir = st.WorkingDir
		c.stderr.reset()
		cmd.Stderr = c.stderr
		ownProcessGroup(cmd)
		side := newStdioSide()
		return &stdioTransport{cmd: cmd, grace: c.g.cfg.StopGrace, log: c.g.log.With("mcp_server", c.spec.Name), side: side}, cmd, side, nil
	}
	ht := c.spec.GetHttp()
	header := http.Header{}
	for k, v := range ht.Headers {
		header.Set(k, v)
	}
	if name := ht.BearerTokenEnv; name != "" {
		tok, err := c.g.powers.secret(name, c.g.getenv)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("bearer token: %w", err)
		}
		header.Set("Authorization", "Bearer "+tok)
	}
	var rt http.RoundTripper = &headerTransport{base: c.g.httpBase, header: header}
	var handler auth.OAuthHandler
	if o := ht.GetOauth(); o != nil {
		var err error
		if rt, handler, err = c.oauthClient(o, rt); err != nil {
			return nil, nil, nil, err
		}
	}
	if perUserOAuth(ht) {
		// The shared session only lists the tools, with a connected user's token; every call
		// goes through the calling user's own session (userLive).
		rt = &oauth2.Transport{Source: c.shared, Base: c.shared.transport(rt)}
	}
	client := &http.Client{Transport: rt}
	side := &httpSide{client: client, url: ht.Url, notify: c.sideNotification}
	if handler != nil {
		side.client = &http.Client{Transport: &handlerTokenTransport{base: rt, h: handler}}
	}
	return &mcp.StreamableClientTransport{Endpoint: ht.Url, HTTPClient: client, MaxRetries: 2, OAuthHandler: handler}, nil, side, nil
}

// lookPath finds command on path (the server's PATH, which may differ from the gateway's).
func lookPath(command, path, dir string) (string, error) {
	if strings.ContainsRune(command, filepath.Separator) {
		if !filepath.IsAbs(command) && dir != "" {
			return filepath.Join(dir, command), nil
		}
		return command, nil
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			continue
		}
		if p, err := exec.LookPath(filepath.Join(d, command)); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("command %q not found on PATH %q", command, path)
}

// headerTransport adds configured headers to every request.
type headerTransport struct {
	base   http.RoundTripper
	header http.Header
}

func (t *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(t.header) > 0 {
		r = r.Clone(r.Context())
		for k, v := range t.header {
			r.Header[k] = v
		}
	}
	return t.base.RoundTrip(r)
}

// tailBuffer keeps the last bytes a stdio server wrote to stderr.
type tailBuffer struct {
	mu  sync.Mutex // guards buf (max is fixed); a leaf
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) reset() {
	t.mu.Lock()
	t.buf = t.buf[:0]
	t.mu.Unlock()
}

func (t *tailBuffer) lastLine() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(t.buf)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return CleanText(l, "text/plain", CleanOptions{MaxBytes: 300}).Text
		}
	}
	return ""
}
