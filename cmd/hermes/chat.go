package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/term"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/app"
	"github.com/hermes-agent/hermes/app/demo"
	"github.com/hermes-agent/hermes/internal/config"
	"github.com/hermes-agent/hermes/internal/rpc"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

const chatHelp = `Type a message and press Enter; a pasted block of lines is one message. Commands:
  /new              start a new session (a fresh context; memories carry over)
  /sessions         list your sessions
  /use <id>         continue another of your sessions
  /context          the last turn's context: token shares per block, recalled memories, evicted messages
  /memory           list what Hermes remembers about you
  /forget <id|all>  forget one memory, or everything about you
  /sticky <text>    send a message that survives trimming
  /help             this help
  /quit             leave (Ctrl-D works too)
Keys: ↑/↓ history, Ctrl-R search it, Ctrl-C cancels the running turn (or clears the line).`

// defaultChatAddr is where hermes serve listens by default.
const defaultChatAddr = "127.0.0.1:7070"

// chatClient is a chat against a running server.
type chatClient struct {
	env     *cliEnv
	addr    string
	user    string
	session string
	verbose bool
	live    bool
	timeout time.Duration
	dataDir string
	history bool
	auth    func(context.Context) context.Context

	sessions sessionv1.SessionServiceClient
	memory   memoryv1.MemoryServiceClient
	orch     orchestratorv1.OrchestratorServiceClient

	// last is the last turn run in this chat, for /context.
	last *chatTurn
	// in is the user's input while the chat runs (a tool's request for input reads it too).
	in lineReader
}

func runChat(ctx context.Context, env *cliEnv, args []string) error {
	fs := newFlagSet("chat")
	// Without --addr the chat goes where hermes serve listens: HERMES_LISTEN, or its default.
	defAddr := defaultChatAddr
	if l := env.getenv("HERMES_LISTEN"); l != "" {
		defAddr = app.DialableAddr(l)
	}
	addr := fs.String("addr", defAddr, "address of a running hermes (all services, or the orchestrator)")
	sessionAddr := fs.String("session-addr", "", "address of the session service; empty means --addr")
	memoryAddr := fs.String("memory-addr", "", "address of the memory service; empty means --addr")
	user := fs.String("user", "", "your user id (default $USER); with --api-key the server takes it from the key")
	session := fs.String("session", "", "continue this session instead of starting a new one")
	apiKey := fs.String("api-key", "", "API key, when the server runs with --auth-file")
	tlsCA := fs.String("tls-ca", "", "PEM CA bundle that verifies the server's certificate; turns TLS on (a cluster's edge, deploy/k8s)")
	tlsServerName := fs.String("tls-server-name", "", "name expected in the server's certificate (default: the host of --addr)")
	verbose := fs.Bool("v", false, "also show each turn's id and model, every model step's token breakdown and tools, and the full usage")
	timeout := fs.Duration("timeout", 0, "deadline of each turn; 0 uses the server's")
	dataDir := fs.String("data-dir", config.DefaultDataDir(), "where the input history is kept (chat/<user>.history)")
	history := fs.Bool("history", true, "keep the input history in --data-dir")
	if err := config.Load(fs, args, func(k string) string {
		return env.getenv(strings.Replace(k, "HERMES_", "HERMES_CHAT_", 1))
	}, ""); err != nil {
		return parseErr("chat", fs, env, err)
	}
	if fs.NArg() > 0 {
		return errUsage{fmt.Sprintf("unexpected argument %q (run hermes chat -h)", fs.Arg(0))}
	}
	if *user == "" && *apiKey == "" {
		*user = env.getenv("USER")
		if *user == "" {
			*user = "me"
		}
	}
	var dialOpts []grpc.DialOption
	if *tlsCA != "" {
		creds, err := (rpc.TLSConfig{CAFile: *tlsCA, ServerName: *tlsServerName}).ClientCredentials(nil)
		if err != nil {
			return err
		}
		dialOpts = append(dialOpts, grpc.WithTransportCredentials(creds))
	}
	conn, err := rpc.Dial(*addr, dialOpts...)
	if err != nil {
		return err
	}
	defer conn.Close()
	sconn, mconn := conn, conn
	if *sessionAddr != "" {
		if sconn, err = rpc.Dial(*sessionAddr, dialOpts...); err != nil {
			return err
		}
		defer sconn.Close()
	}
	if *memoryAddr != "" {
		if mconn, err = rpc.Dial(*memoryAddr, dialOpts...); err != nil {
			return err
		}
		defer mconn.Close()
	}
	c := &chatClient{
		env: env, addr: *addr, user: *user, session: *session, verbose: *verbose, timeout: *timeout,
		dataDir: *dataDir, history: *history, live: isTerminal(env.stdout),
		auth:     func(ctx context.Context) context.Context { return ctx },
		sessions: sessionv1.NewSessionServiceClient(sconn),
		memory:   memoryv1.NewMemoryServiceClient(mconn),
		orch:     orchestratorv1.NewOrchestratorServiceClient(conn),
	}
	if *apiKey != "" {
		key := *apiKey
		c.auth = func(ctx context.Context) context.Context {
			return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
		}
	}
	return c.loop(ctx)
}

// isTerminal reports whether w is a terminal.
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func (c *chatClient) out(format string, args ...any) { fmt.Fprintf(c.env.stdout, format, args...) }

// unreachable is the one line saying that no server answers, and what to do.
func (c *chatClient) unreachable() error {
	return fmt.Errorf("no Hermes server answers at %s: start one with \"hermes serve\" (or \"hermes demo -serve %s\" to try the scripted model), or point --addr (HERMES_CHAT_ADDR) at one", c.addr, c.addr)
}

func (c *chatClient) loop(ctx context.Context) error {
	if c.session == "" {
		if err := c.newSession(ctx); err != nil {
			return err
		}
	} else {
		if err := c.use(ctx, c.session); err != nil {
			if status.Code(err) == codes.Unavailable {
				return c.unreachable()
			}
			return fmt.Errorf("session %s: %s", c.session, status.Convert(err).Message())
		}
		c.out("Continuing session %s as %s. /help lists the commands.\n", c.session, c.user)
	}
	in, err := c.openInput()
	if err != nil {
		return err
	}
	defer in.Close()
	c.in = in
	for {
		line, err := in.ReadLine(ctx)
		switch {
		case errors.Is(err, errQuit):
			c.out("\n")
			return nil
		case err != nil:
			return err
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if quit, err := c.command(ctx, line); quit {
			return nil
		} else if err != nil {
			c.out("  ! %s\n", status.Convert(err).Message())
		}
	}
}

// use makes the user's session id the current one, once the session service has it.
func (c *chatClient) use(ctx context.Context, id string) error {
	resp, err := c.sessions.GetSession(c.auth(ctx), &sessionv1.GetSessionRequest{SessionId: id, UserId: c.user})
	if err != nil {
		return err
	}
	c.session = id
	if u := resp.GetSession().GetUserId(); u != "" {
		c.user = u
	}
	c.last = nil
	return nil
}

// command runs a line: a slash command or a message.
func (c *chatClient) command(ctx context.Context, line string) (bool, error) {
	cmd, arg, _ := strings.Cut(line, " ")
	arg = strings.TrimSpace(arg)
	switch cmd {
	case "/quit", "/exit":
		return true, nil
	case "/help":
		c.out("%s\n", chatHelp)
	case "/new":
		return false, c.newSession(ctx)
	case "/sessions":
		return false, c.listSessions(ctx)
	case "/use":
		if arg == "" {
			return false, errors.New("usage: /use <session id>")
		}
		if err := c.use(ctx, arg); err != nil {
			return false, err
		}
		c.out("  now in session %s\n", arg)
	case "/context":
		return false, c.showContext(ctx)
	case "/memory":
		return false, c.listMemories(ctx)
	case "/forget":
		return false, c.forget(ctx, arg)
	case "/sticky":
		if arg == "" {
			return false, errors.New("usage: /sticky <text>")
		}
		return false, c.turn(ctx, arg, true)
	default:
		if strings.HasPrefix(cmd, "/") && !strings.Contains(cmd, "\n") {
			return false, fmt.Errorf("unknown command %s (/help lists them)", cmd)
		}
		return false, c.turn(ctx, line, false)
	}
	return false, nil
}

func (c *chatClient) newSession(ctx context.Context) error {
	resp, err := c.sessions.CreateSession(c.auth(ctx), &sessionv1.CreateSessionRequest{UserId: c.user, Title: "hermes chat " + time.Now().Format("2006-01-02 15:04")})
	if err != nil {
		if status.Code(err) == codes.Unavailable {
			return c.unreachable()
		}
		return fmt.Errorf("create a session: %s", status.Convert(err).Message())
	}
	c.session = resp.GetSession().GetId()
	if u := resp.GetSession().GetUserId(); u != "" {
		c.user = u
	}
	c.last = nil
	c.out("New session %s for %s. /help lists the commands.\n", c.session, c.user)
	return nil
}

func (c *chatClient) listSessions(ctx context.Context) error {
	resp, err := c.sessions.ListSessions(c.auth(ctx), &sessionv1.ListSessionsRequest{UserId: c.user, PageSize: 20})
	if err != nil {
		return err
	}
	if len(resp.GetSessions()) == 0 {
		c.out("  no sessions\n")
	}
	for _, s := range resp.GetSessions() {
		mark := " "
		if s.GetId() == c.session {
			mark = "*"
		}
		st := s.GetState()
		c.out("  %s %s  %-28q %9s %12s %14s  last active %s\n", mark, s.GetId(), s.GetTitle(),
			demo.Plural(int(st.GetTurnCount()), "turn", "turns"), demo.Plural(int(st.GetMessageCount()), "message", "messages"),
			demo.Plural(int(st.GetTokenCount()), "token", "tokens"), st.GetUpdatedAt().AsTime().Local().Format("2006-01-02 15:04"))
	}
	return nil
}

func (c *chatClient) listMemories(ctx context.Context) error {
	resp, err := c.memory.ListMemories(c.auth(ctx), &memoryv1.ListMemoriesRequest{UserId: c.user, PageSize: 50})
	if err != nil {
		return err
	}
	if len(resp.GetMemories()) == 0 {
		c.out("  no memories yet\n")
	}
	for _, m := range resp.GetMemories() {
		c.out("  %s  (%s, %s) %s", m.GetId(), strings.ToLower(strings.TrimPrefix(m.GetType().String(), "MEMORY_TYPE_")),
			strings.ToLower(strings.TrimPrefix(m.GetTier().String(), "TIER_")), m.GetContent())
		if len(m.GetAttributes()) > 0 {
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(m.GetAttributes())) {
				parts = append(parts, k+"="+m.GetAttributes()[k])
			}
			c.out(" [%s]", strings.Join(parts, ", "))
		}
		c.out("\n")
	}
	return nil
}

func (c *chatClient) forget(ctx context.Context, arg string) error {
	switch arg {
	case "":
		return errors.New("usage: /forget <memory id> or /forget all")
	case "all":
		resp, err := c.memory.ForgetUser(c.auth(ctx), &memoryv1.ForgetUserRequest{UserId: c.user})
		if err != nil {
			return err
		}
		c.out("  forgot %s (and %d expired) about %s\n", demo.Plural(int(resp.GetMemories()), "memory", "memories"), resp.GetExpired(), c.user)
	default:
		if _, err := c.memory.Forget(c.auth(ctx), &memoryv1.ForgetRequest{UserId: c.user, MemoryId: arg}); err != nil {
			return err
		}
		c.out("  forgot %s\n", arg)
	}
	return nil
}
