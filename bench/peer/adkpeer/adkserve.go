package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/glebarez/sqlite"
	"google.golang.org/adk/agent"
	"google.golang.org/adk/agent/llmagent"
	"google.golang.org/adk/runner"
	"google.golang.org/adk/session"
	"google.golang.org/adk/session/database"
	"google.golang.org/adk/tool"
	"google.golang.org/adk/tool/functiontool"
	"google.golang.org/genai"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// Command adkpeer is the adk-go side of the side-by-side benchmark (bench/peer): an adk-go
// runner with an llmagent, a calculator function tool and an in-memory or SQLite session
// service, behind two HTTP calls on loopback: POST /session (create a session) and POST /turn
// (run one turn with runner.Run and answer when the runner's events are done). The harness
// starts it as a child process, so its CPU and RSS are read from /proc the same way as Hermes'
// processes. It is a module of its own so that neither Hermes nor the harness shares its
// dependencies.
func main() {
	if err := serve(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "adkpeer:", err)
		os.Exit(1)
	}
}

const adkApp = "peer"

type calcArgs struct {
	Expression string `json:"expression" jsonschema:"arithmetic expression, for example (12.5 * 4 + 3) / 2"`
}

type calcOut struct {
	Expression string  `json:"expression"`
	Result     float64 `json:"result"`
}

// calculator is the turn's function tool.
func calculator() (tool.Tool, error) {
	return functiontool.New(functiontool.Config{
		Name:        "calculator",
		Description: "Evaluate an arithmetic expression exactly as written and return the number.",
	}, func(_ agent.ToolContext, a calcArgs) (calcOut, error) {
		v, err := evaluate(a.Expression)
		if err != nil {
			return calcOut{}, err
		}
		return calcOut{Expression: a.Expression, Result: v}, nil
	})
}

// sqliteDSN opens the session database durably: WAL with synchronous=FULL fsyncs the log at
// every commit. Concurrent sessions share the one writer: transactions take the write lock
// when they begin (_txlock=immediate) and wait for it (busy_timeout); adk-go's AppendEvent
// reads, then writes in one transaction, which as a deferred transaction fails with
// SQLITE_BUSY whenever another session wrote in between.
func sqliteDSN(path string) string {
	return "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(10000)&_txlock=immediate"
}

func newSessionService(kind, dataDir string) (session.Service, error) {
	switch kind {
	case "memory":
		return session.InMemoryService(), nil
	case "sqlite":
		if err := os.MkdirAll(dataDir, 0o750); err != nil {
			return nil, err
		}
		svc, err := database.NewSessionService(sqlite.Open(sqliteDSN(dataDir+"/sessions.db")),
			&gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
		if err != nil {
			return nil, err
		}
		if err := database.AutoMigrate(svc); err != nil {
			return nil, err
		}
		return svc, nil
	}
	return nil, fmt.Errorf("session service %q: want memory or sqlite", kind)
}

// adkServer is the child's HTTP front of one runner.
type adkServer struct {
	sessions session.Service
	runner   *runner.Runner
}

func newADKServer(sessionKind, dataDir, modelURL string) (*adkServer, error) {
	svc, err := newSessionService(sessionKind, dataDir)
	if err != nil {
		return nil, err
	}
	calc, err := calculator()
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: time.Minute}
	a, err := llmagent.New(llmagent.Config{
		Name:        "calculator_agent",
		Description: "Answers arithmetic questions with the calculator tool.",
		Model:       newOpenAIModel(modelURL, "unused-by-the-scripted-model", "scripted-peer", hc),
		Instruction: "You are a helpful assistant. Use the calculator for any calculation.",
		Tools:       []tool.Tool{calc},
	})
	if err != nil {
		return nil, err
	}
	r, err := runner.New(runner.Config{AppName: adkApp, Agent: a, SessionService: svc})
	if err != nil {
		return nil, err
	}
	return &adkServer{sessions: svc, runner: r}, nil
}

type turnRequest struct {
	User    string `json:"user"`
	Session string `json:"session"`
	Text    string `json:"text"`
}

type turnResponse struct {
	Session string `json:"session,omitempty"`
	Text    string `json:"text,omitempty"`
}

func (s *adkServer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /session", func(w http.ResponseWriter, r *http.Request) {
		var req turnRequest
		if !decode(w, r, &req) {
			return
		}
		resp, err := s.sessions.Create(r.Context(), &session.CreateRequest{AppName: adkApp, UserID: req.User})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeJSON(w, turnResponse{Session: resp.Session.ID()})
	})
	mux.HandleFunc("POST /turn", func(w http.ResponseWriter, r *http.Request) {
		var req turnRequest
		if !decode(w, r, &req) {
			return
		}
		text, err := s.turn(r.Context(), req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeJSON(w, turnResponse{Text: text})
	})
	return mux
}

// turn runs the agent on one user message and returns the final answer's text.
func (s *adkServer) turn(ctx context.Context, req turnRequest) (string, error) {
	msg := genai.NewContentFromText(req.Text, genai.RoleUser)
	var final string
	for ev, err := range s.runner.Run(ctx, req.User, req.Session, msg, agent.RunConfig{}) {
		if err != nil {
			return "", err
		}
		if ev.Content != nil && ev.IsFinalResponse() {
			final = contentText(ev.Content)
		}
	}
	if final == "" {
		return "", errors.New("the runner ended without a final answer")
	}
	return final, nil
}

func decode(w http.ResponseWriter, r *http.Request, into any) bool {
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(into); err != nil {
		http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// serve prints "listening <addr>" on stdout once it serves, and serves until SIGTERM.
func serve(args []string) error {
	fs := flag.NewFlagSet("adkpeer", flag.ContinueOnError)
	sessions := fs.String("sessions", "memory", "session service: memory or sqlite")
	dataDir := fs.String("data", "", "directory of the SQLite database")
	modelURL := fs.String("model-url", "", "OpenAI-compatible base URL")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s, err := newADKServer(*sessions, *dataDir, *modelURL)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s.handler(), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(slog.Default().Handler(), slog.LevelError)}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	fmt.Printf("listening %s\n", lis.Addr())
	if err := srv.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
