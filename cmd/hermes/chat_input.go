package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/reeflective/readline"
	"golang.org/x/term"
)

// errQuit ends the chat: Ctrl-D, the end of the input, or Ctrl-C twice at the prompt.
var errQuit = errors.New("quit")

// historyLimit is how many entries of input history are kept per user.
const historyLimit = 1000

// lineReader reads the user's input, one message (or command) at a time.
type lineReader interface {
	// ReadLine prompts and returns the next input; errQuit when the user leaves.
	ReadLine(ctx context.Context) (string, error)
	Close() error
}

// chatCommands are the slash commands, for completion.
func chatCommands() []string {
	return []string{"/new", "/sessions", "/use", "/context", "/memory", "/forget", "/sticky", "/help", "/quit"}
}

// openInput is a line editor when the input is a terminal — arrows, history kept per user in
// the data directory, Ctrl-R, multi-line paste — and plain lines otherwise.
func (c *chatClient) openInput() (lineReader, error) {
	if f, ok := c.env.stdin.(*os.File); ok && f == os.Stdin && term.IsTerminal(int(f.Fd())) {
		path := ""
		if c.history {
			path = historyPath(c.dataDir, c.user)
		}
		return newTerminalInput(path, c.env.stdout)
	}
	return newPlainInput(c.env.stdin, c.env.stdout, c.env.interrupts), nil
}

// historyPath is a user's history file: <data dir>/chat/<user>.history.
func historyPath(dataDir, user string) string {
	if user == "" {
		user = "default"
	}
	return filepath.Join(dataDir, "chat", url.PathEscape(user)+".history")
}

// terminalInput is the line editor (github.com/reeflective/readline: emacs keys by default,
// the user's ~/.inputrc applies).
type terminalInput struct {
	rl  *readline.Shell
	out io.Writer
	fd  int
	// state is the terminal's mode before the chat, restored by Close whatever the editor left.
	state *term.State
	// interrupted is set by a Ctrl-C on an empty prompt; a second one leaves.
	interrupted bool
}

func newTerminalInput(history string, out io.Writer) (*terminalInput, error) {
	fd := int(os.Stdin.Fd())
	state, err := term.GetState(fd)
	if err != nil {
		return nil, err
	}
	rl := readline.NewShell()
	rl.Prompt.Primary(func() string { return "you › " })
	// A pasted block arrives as one message instead of one message per line.
	if err := rl.Config.Set("enable-bracketed-paste", true); err != nil {
		return nil, err
	}
	// The prompt always starts a line, so the editor need not ask the terminal where the cursor
	// is: some terminals never answer, and keys typed while the answer is awaited are lost.
	if err := rl.Config.Set("cursor-position-probe", false); err != nil {
		return nil, err
	}
	rl.Completer = func(line []rune, cursor int) readline.Completions {
		if len(line) > 0 && line[0] == '/' && !strings.ContainsRune(string(line[:cursor]), ' ') {
			return readline.CompleteValues(chatCommands()...)
		}
		return readline.Completions{}
	}
	if history != "" {
		if err := os.MkdirAll(filepath.Dir(history), 0o700); err != nil {
			return nil, fmt.Errorf("history: %w", err)
		}
		if err := trimHistory(history, historyLimit); err != nil {
			return nil, fmt.Errorf("history: %w", err)
		}
		// A missing file is a history still empty; the source creates it on the first entry.
		h, _ := readline.NewHistoryFromFile(history)
		rl.History.Add("history", h)
	}
	return &terminalInput{rl: rl, out: out, fd: fd, state: state}, nil
}

func (t *terminalInput) ReadLine(ctx context.Context) (string, error) {
	fmt.Fprintln(t.out)
	type result struct {
		line string
		err  error
	}
	for {
		// The editor cannot be interrupted; when ctx ends (SIGTERM) the chat leaves without
		// it, and Close puts the terminal back.
		done := make(chan result, 1)
		go func() {
			line, err := t.rl.Readline()
			done <- result{line, err}
		}()
		var r result
		select {
		case <-ctx.Done():
			return "", errQuit
		case r = <-done:
		}
		switch {
		case errors.Is(r.err, readline.ErrInterrupt):
			// Ctrl-C clears a line being typed; on an empty prompt it warns once, then leaves.
			if strings.TrimSpace(r.line) != "" {
				t.interrupted = false
				continue
			}
			if t.interrupted {
				return "", errQuit
			}
			t.interrupted = true
			fmt.Fprintln(t.out, "  (Ctrl-C again, Ctrl-D or /quit leaves)")
			continue
		case errors.Is(r.err, io.EOF):
			return "", errQuit
		case r.err != nil:
			return "", r.err
		}
		t.interrupted = false
		return r.line, nil
	}
}

func (t *terminalInput) Close() error { return term.Restore(t.fd, t.state) }

// trimHistory keeps the last limit entries of a history file (one JSON object a line).
func trimHistory(path string, limit int) error {
	data, err := os.ReadFile(path) // #nosec G304 -- the history file in the user's own data directory
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) <= 2*limit {
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, bytes.Join(lines[len(lines)-limit:], nil), 0o600); err != nil { // #nosec G703 -- the history file in the user's own data directory
		return err
	}
	return os.Rename(tmp, path)
}

// plainInput reads lines from a pipe or file. Lines are read on their own goroutine so that
// Ctrl-C or the end of ctx ends the chat at the prompt too, not only after the next line.
type plainInput struct {
	out        io.Writer
	lines      chan string
	readErr    chan error
	interrupts <-chan os.Signal
	stop       chan struct{}
}

func newPlainInput(in io.Reader, out io.Writer, interrupts <-chan os.Signal) *plainInput {
	p := &plainInput{out: out, lines: make(chan string), readErr: make(chan error, 1), interrupts: interrupts, stop: make(chan struct{})}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			case <-p.stop:
				return
			}
		}
		p.readErr <- sc.Err()
	}()
	return p
}

func (p *plainInput) ReadLine(ctx context.Context) (string, error) {
	fmt.Fprint(p.out, "\nyou › ")
	select {
	case <-ctx.Done():
		return "", errQuit
	case <-p.interrupts:
		return "", errQuit
	case l, ok := <-p.lines:
		if ok {
			// The input is not echoed (it is not a terminal): echo it, so the transcript reads
			// like a conversation.
			fmt.Fprintln(p.out, l)
			return l, nil
		}
		select {
		case err := <-p.readErr:
			if err != nil {
				return "", err
			}
		default:
		}
		return "", errQuit
	}
}

func (p *plainInput) Close() error {
	close(p.stop)
	return nil
}
