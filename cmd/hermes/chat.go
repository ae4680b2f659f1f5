package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hermes-agent/hermes/internal/config"
	"github.com/hermes-agent/hermes/internal/demo"
	"github.com/hermes-agent/hermes/internal/rpc"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

const chatHelp = `Type a message and press Enter. Commands:
  /new              start a new session (a fresh context; memories carry over)
  /sessions         list your sessions
  /use <id>         continue another of your sessions
  /memory           list what Hermes remembers about you
  /forget <id|all>  forget one memory, or everything about you
  /sticky <text>    send a message that survives trimming
  /help             this help
  /quit             leave (Ctrl-D works too)`

// chatClient is a chat against a running server.
type chatClient struct {
	env      *cliEnv
	user     string
	session  string
	verbose  bool
	timeout  time.Duration
	auth     func(context.Context) context.Context
	sessions sessionv1.SessionServiceClient
	memory   memoryv1.MemoryServiceClient
	orch     orchestratorv1.OrchestratorServiceClient
}

func runChat(ctx context.Context, env *cliEnv, args []string) error {
	fs := newFlagSet("chat")
	addr := fs.String("addr", "127.0.0.1:7070", "address of a running hermes (all services, or the orchestrator)")
	sessionAddr := fs.String("session-addr", "", "address of the session service; empty means --addr")
	memoryAddr := fs.String("memory-addr", "", "address of the memory service; empty means --addr")
	user := fs.String("user", "", "your user id (default $USER); with API keys it comes from the key")
	session := fs.String("session", "", "continue this session instead of starting a new one")
	apiKey := fs.String("api-key", "", "API key, when the server runs with --auth-file")
	verbose := fs.Bool("v", false, "show the tools and token breakdown of every model step")
	timeout := fs.Duration("timeout", 0, "deadline of each turn; 0 uses the server's")
	fs.VisitAll(func(f *flag.Flag) { f.Usage += " [" + config.EnvName("chat."+f.Name) + "]" })
	if err := config.Load(fs, args, func(k string) string {
		return env.getenv(strings.Replace(k, "HERMES_", "HERMES_CHAT_", 1))
	}, ""); err != nil {
		return parseErr("chat", fs, env, err)
	}
	if fs.NArg() > 0 {
		return errUsage{fmt.Sprintf("unexpected argument %q (run hermes chat -h)", fs.Arg(0))}
	}
	if *user == "" {
		*user = env.getenv("USER")
	}
	if *user == "" {
		*user = "me"
	}
	conn, err := rpc.Dial(*addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	sconn, mconn := conn, conn
	if *sessionAddr != "" {
		if sconn, err = rpc.Dial(*sessionAddr); err != nil {
			return err
		}
		defer sconn.Close()
	}
	if *memoryAddr != "" {
		if mconn, err = rpc.Dial(*memoryAddr); err != nil {
			return err
		}
		defer mconn.Close()
	}
	c := &chatClient{
		env: env, user: *user, session: *session, verbose: *verbose, timeout: *timeout,
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

func (c *chatClient) out(format string, args ...any) { fmt.Fprintf(c.env.stdout, format, args...) }

func (c *chatClient) loop(ctx context.Context) error {
	if c.session == "" {
		if err := c.newSession(ctx); err != nil {
			return err
		}
	} else {
		if err := c.use(ctx, c.session); err != nil {
			return fmt.Errorf("session %s: %s", c.session, status.Convert(err).Message())
		}
		c.out("Continuing session %s as %s. /help lists the commands.\n", c.session, c.user)
	}
	// Lines are read on their own goroutine so that Ctrl-C (which ends ctx) ends the chat at the
	// prompt too, not only after the next Enter.
	lines := make(chan string)
	readErr := make(chan error, 1)
	go func() {
		defer close(lines)
		in := bufio.NewScanner(c.env.stdin)
		in.Buffer(make([]byte, 64<<10), 1<<20)
		for in.Scan() {
			select {
			case lines <- in.Text():
			case <-ctx.Done():
				return
			}
		}
		readErr <- in.Err()
	}()
	for {
		c.out("\nyou › ")
		var line string
		select {
		case <-ctx.Done():
			c.out("\n")
			return nil
		case l, ok := <-lines:
			if !ok {
				c.out("\n")
				select {
				case err := <-readErr:
					return err
				default:
					return nil
				}
			}
			line = strings.TrimSpace(l)
		}
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
	if _, err := c.sessions.GetSession(c.auth(ctx), &sessionv1.GetSessionRequest{SessionId: id, UserId: c.user}); err != nil {
		return err
	}
	c.session = id
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
		if strings.HasPrefix(cmd, "/") {
			return false, fmt.Errorf("unknown command %s (/help lists them)", cmd)
		}
		return false, c.turn(ctx, line, false)
	}
	return false, nil
}

func (c *chatClient) newSession(ctx context.Context) error {
	resp, err := c.sessions.CreateSession(c.auth(ctx), &sessionv1.CreateSessionRequest{UserId: c.user, Title: "hermes chat " + time.Now().Format("2006-01-02 15:04")})
	if err != nil {
		return fmt.Errorf("create a session: %s", status.Convert(err).Message())
	}
	c.session = resp.GetSession().GetId()
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
		c.out("  %s %s  %-28q %3d turns %5d messages %7d tokens  last active %s\n", mark, s.GetId(), s.GetTitle(),
			st.GetTurnCount(), st.GetMessageCount(), st.GetTokenCount(), st.GetUpdatedAt().AsTime().Local().Format("2006-01-02 15:04"))
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
		c.out("  forgot %d memories (and %d expired ones) about %s\n", resp.GetMemories(), resp.GetExpired(), c.user)
	default:
		if _, err := c.memory.Forget(c.auth(ctx), &memoryv1.ForgetRequest{UserId: c.user, MemoryId: arg}); err != nil {
			return err
		}
		c.out("  forgot %s\n", arg)
	}
	return nil
}

func (c *chatClient) turn(ctx context.Context, text string, sticky bool) error {
	opts := &orchestratorv1.TurnOptions{Sticky: sticky}
	if c.timeout > 0 {
		opts.Timeout = durationpb.New(c.timeout)
	}
	p := &demo.Printer{W: c.env.stdout, Verbose: c.verbose}
	_, err := demo.RunTurn(c.auth(ctx), c.orch, &orchestratorv1.RunTurnRequest{SessionId: c.session, UserId: c.user, Text: text, Options: opts}, p)
	if err != nil && ctx.Err() != nil {
		return errors.New("turn cancelled")
	}
	return err
}
