//go:build linux || darwin

package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/hinshun/vt10x"

	"github.com/hermes-agent/hermes/app/demo"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/testenv"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	"github.com/hermes-agent/hermes/test/hermestest"
)

// TestMain lets a test start this test binary as the hermes command (for a real terminal).
func TestMain(m *testing.M) {
	if os.Getenv("HERMES_TEST_RUN_MAIN") == "1" {
		main()
	}
	os.Exit(m.Run())
}

// terminal is a pseudo-terminal running hermes, seen through a terminal emulator.
type terminal struct {
	t    *testing.T
	ptmx *os.File
	vt   vt10x.Terminal
	cmd  *exec.Cmd
	done chan error

	mu  sync.Mutex
	raw bytes.Buffer // everything hermes wrote, guarded by mu
}

func startTerminal(t *testing.T, env []string, args ...string) *terminal {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append([]string{"HERMES_TEST_RUN_MAIN=1", "TERM=xterm-256color", "HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}, env...)
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 50, Cols: 160})
	if err != nil {
		t.Fatal(err)
	}
	term := &terminal{t: t, ptmx: ptmx, cmd: cmd, done: make(chan error, 1)}
	term.vt = vt10x.New(vt10x.WithWriter(ptmx), vt10x.WithSize(160, 50))
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			if n > 0 {
				_, _ = term.vt.Write(buf[:n])
				term.mu.Lock()
				term.raw.Write(buf[:n])
				term.mu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}()
	go func() { term.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = ptmx.Close()
	})
	return term
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[a-zA-Z~]|\x1b[()][0-9A-Za-z]|\r`)

// output is what hermes printed so far, without escape sequences.
func (term *terminal) output() string {
	term.mu.Lock()
	defer term.mu.Unlock()
	return ansi.ReplaceAllString(term.raw.String(), "")
}

// waitOutput waits until the output after mark contains want and returns the new mark.
func (term *terminal) waitOutput(mark int, want string) int {
	term.t.Helper()
	var i int
	term.waitFor("the terminal to show "+want, func() bool {
		out := term.output()
		i = strings.Index(out[min(mark, len(out)):], want)
		return i >= 0
	})
	return mark + i + len(want)
}

// waitPrompt waits until the cursor sits after an empty "you › " prompt.
func (term *terminal) waitPrompt() {
	term.t.Helper()
	term.waitFor("an empty prompt", func() bool {
		term.vt.Lock()
		defer term.vt.Unlock()
		cur := term.vt.Cursor()
		var line []rune
		for x := 0; x < cur.X; x++ {
			line = append(line, term.vt.Cell(x, cur.Y).Char)
		}
		return strings.TrimRight(string(line), " ") == "you ›"
	})
}

// waitFor polls cond until it holds; after a minute it fails the test with the screen.
func (term *terminal) waitFor(what string, cond func() bool) {
	term.t.Helper()
	if !testenv.Poll(60*time.Second, cond) {
		term.mu.Lock()
		raw := term.raw.String()
		term.mu.Unlock()
		term.t.Fatalf("timed out waiting for %s; the output:\n%s\nits end as written: %q", what, term.output(), raw[max(0, len(raw)-400):])
	}
}

func (term *terminal) send(keys string) {
	term.t.Helper()
	if _, err := term.ptmx.Write([]byte(keys)); err != nil {
		term.t.Fatal(err)
	}
}

// Keys as a terminal sends them.
const (
	keyLeft      = "\x1b[D"
	keyUp        = "\x1b[A"
	keyBackspace = "\x7f"
	keyCtrlA     = "\x01"
	keyCtrlC     = "\x03"
	keyCtrlD     = "\x04"
	keyCtrlE     = "\x05"
	keyCtrlR     = "\x12"
	keyEnter     = "\r"
	pasteStart   = "\x1b[200~"
	pasteEnd     = "\x1b[201~"
)

// TestChatTerminal drives hermes chat in a pseudo-terminal against a running stack with the
// scripted model: line editing with arrows and backspace, history with ↑ and Ctrl-R (kept in
// the data directory), a pasted block of lines as one message, Ctrl-C cancelling a running
// turn, and Ctrl-C then Ctrl-D at the prompt. What the editor sent is checked in the session's
// messages on the server.
func TestChatTerminal(t *testing.T) {
	a := hermestest.Start(t, hermestest.Options{
		Model: func(req scripted.Request) scripted.Reply {
			if strings.Contains(req.LastUser(), "slow") && !req.JSON {
				return scripted.Reply{Text: "too late", Delay: 10 * time.Minute}
			}
			return demo.Model()(req)
		},
		ScriptExtractor: true,
		Args:            []string{"--model=scripted"},
		Log:             slog.New(slog.DiscardHandler),
	}).App

	dataDir := t.TempDir()
	term := startTerminal(t, []string{"HERMES_LISTEN=" + a.Addr()}, "chat", "--user", "tty-user", "--data-dir", dataDir)
	mark := term.waitOutput(0, "New session ")
	sid := strings.Fields(term.output()[mark:])[0]
	term.waitPrompt()

	// Arrows and backspace edit the line: "helo" ← "l" End " wrld" ← ← ← "o" → "hello world".
	term.send("helo" + keyLeft + "l" + keyCtrlE + " wrld" + keyLeft + keyLeft + keyLeft + "o" + keyEnter)
	mark = term.waitOutput(mark, "done in ")
	term.waitPrompt()
	// ↑ recalls it; backspace and typing change its end: "hello there".
	term.send(keyUp + strings.Repeat(keyBackspace, 5) + "there" + keyEnter)
	mark = term.waitOutput(mark, "done in ")
	term.waitPrompt()
	// Ctrl-R finds "hello world" again; Enter accepts it. (Keys are sent as a person types them:
	// each once the screen shows the last one took effect.)
	term.send(keyCtrlR)
	m := term.waitOutput(mark, "(inc-search): _")
	term.send("wor")
	term.waitOutput(m, "(inc-search): wor_")
	term.send(keyEnter)
	mark = term.waitOutput(mark, "done in ")
	term.waitPrompt()
	// A pasted block of two lines is one message.
	term.send(pasteStart + "line one\nline two" + pasteEnd)
	term.send(keyEnter)
	mark = term.waitOutput(mark, "done in ")
	term.waitPrompt()

	conn, err := rpc.Dial(a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sessions := sessionv1.NewSessionServiceClient(conn)
	userTexts := func() []string {
		resp, err := sessions.ListMessages(context.Background(), &sessionv1.ListMessagesRequest{SessionId: sid, UserId: "tty-user"})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range resp.GetMessages() {
			if m.GetRole() == sessionv1.Role_ROLE_USER {
				out = append(out, m.GetContent())
			}
		}
		return out
	}
	want := []string{"hello world", "hello there", "hello world", "line one\nline two"}
	if got := userTexts(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("the server received %q, want %q\n%s", got, want, term.output())
	}

	// Ctrl-C while the model is thinking cancels the turn; the chat goes on.
	term.send("slow please" + keyEnter)
	testenv.WaitFor(t, 60*time.Second, "the slow turn to start", func() bool {
		texts := userTexts()
		return len(texts) == 5
	})
	term.send(keyCtrlC)
	mark = term.waitOutput(mark, "turn cancelled")
	term.waitPrompt()
	term.send("/sessions" + keyEnter)
	mark = term.waitOutput(mark, sid)
	term.waitPrompt()

	// Ctrl-C on an empty prompt warns, Ctrl-D leaves.
	term.send(keyCtrlC)
	mark = term.waitOutput(mark, "Ctrl-C again, Ctrl-D or /quit leaves")
	term.waitPrompt()
	term.send(keyCtrlA + keyCtrlD)
	select {
	case err := <-term.done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("hermes chat exited with %d:\n%s", exit.ExitCode(), term.output())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("hermes chat did not leave on Ctrl-D:\n%s", term.output())
	}
	// No escape codes reached the model, and the history is kept for the user.
	if texts := userTexts(); strings.ContainsAny(strings.Join(texts, ""), "\x1b\x7f") {
		t.Errorf("escape codes were sent: %q", texts)
	}
	hist, err := os.ReadFile(filepath.Join(dataDir, "chat", "tty-user.history"))
	if err != nil || !bytes.Contains(hist, []byte(`"hello there"`)) || !bytes.Contains(hist, []byte(`line one\nline two`)) {
		t.Errorf("history file: %v\n%s", err, hist)
	}
}

// TestChatNoServer: one line saying no server answers, and what to do.
func TestChatNoServer(t *testing.T) {
	var out, errb bytes.Buffer
	// A port nothing listens on: one this test had and closed.
	addr := testenv.ClosedAddr(t)
	code := run(context.Background(), []string{"chat", "--addr", addr}, strings.NewReader(""), &out, &errb, func(k string) string { return "" })
	msg := errb.String()
	if code != 1 || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, "no Hermes server answers at "+addr) || !strings.Contains(msg, "hermes serve") || !strings.Contains(msg, "--addr") {
		t.Errorf("exit %d, stderr %q", code, msg)
	}
	// HERMES_LISTEN is where the chat goes without --addr.
	errb.Reset()
	run(context.Background(), []string{"chat"}, strings.NewReader(""), &out, &errb, func(k string) string {
		if k == "HERMES_LISTEN" {
			return "0.0.0.0:" + strings.Split(addr, ":")[1]
		}
		return ""
	})
	if !strings.Contains(errb.String(), "at "+addr) {
		t.Errorf("HERMES_LISTEN not used: %q", errb.String())
	}
}
