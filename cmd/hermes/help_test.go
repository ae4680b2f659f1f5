package main

import (
	"bytes"
	"context"
	"flag"
	"regexp"
	"strings"
	"testing"

	"github.com/hermes-agent/hermes/app"
)

// TestServeHelp checks that hermes serve -h is short and starts with the essentials, and that
// -h all lists every flag hermes serve has exactly once, in the group of the service that
// registers it.
func TestServeHelp(t *testing.T) {
	help := func(args ...string) string {
		var out, errb bytes.Buffer
		if code := run(context.Background(), append([]string{"serve"}, args...), nil, &out, &errb, func(string) string { return "" }); code != 0 {
			t.Fatalf("hermes serve %v: exit %d: %s", args, code, errb.String())
		}
		return out.String()
	}
	short := help("-h")
	if n := strings.Count(short, "\n"); n > 60 {
		t.Errorf("hermes serve -h is %d lines, want at most 60:\n%s", n, short)
	}
	if i, j := strings.Index(short, "Essentials:"), strings.Index(short, "--listen"); i < 0 || j < i {
		t.Errorf("hermes serve -h does not start with the essentials:\n%s", short)
	}
	for _, want := range []string{"--model-base-url", "--data-dir", "--redis-url", "--auth-file", "memory ", "HERMES_MEMORY_MIN_SIMILARITY"} {
		if !strings.Contains(short, want) {
			t.Errorf("hermes serve -h lacks %q", want)
		}
	}

	all := help("-h", "all")
	var cfg app.Config
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	fs.VisitAll(func(f *flag.Flag) {
		re := regexp.MustCompile(`(?m)^  --` + regexp.QuoteMeta(f.Name) + `( |$)`)
		if n := len(re.FindAllStringIndex(all, -1)); n != 1 {
			t.Errorf("--%s is listed %d times in hermes serve -h all", f.Name, n)
		}
	})
	// A service's flags sit under its title.
	if i, j := strings.Index(all, "Memory service:"), strings.Index(all, "\n  --memory.min-similarity "); i < 0 || j < i || strings.Contains(all[i:j], "\n\n") {
		t.Errorf("--memory.min-similarity is not in the memory service's group")
	}
	if one := help("-h", "session"); !strings.Contains(one, "\n  --session.window-turns ") || strings.Contains(one, "\n  --memory.min-similarity ") {
		t.Errorf("hermes serve -h session:\n%s", one)
	}
}

// TestExitCodes: usage errors exit 2, help 0.
func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{nil, 2, "Usage: hermes <command>"},
		{[]string{"help"}, 0, "Commands:"},
		{[]string{"help", "chat"}, 0, "Usage: hermes chat"},
		{[]string{"nope"}, 2, "unknown command"},
		{[]string{"version", "extra"}, 2, "takes none"},
		{[]string{"serve", "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"serve", "--target=bogus"}, 2, "unknown target"},
		{[]string{"serve", "-h", "bogus"}, 2, "no settings group"},
		{[]string{"serve", "extra"}, 2, "unexpected argument"},
		{[]string{"chat", "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"chat", "extra"}, 2, "unexpected argument"},
		{[]string{"demo", "-v=maybe"}, 2, "invalid boolean"},
		{[]string{"demo", "-h"}, 0, "Usage: hermes demo"},
		{[]string{"chat", "-h"}, 0, "HERMES_CHAT_ADDR"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), tc.args, strings.NewReader(""), &out, &errb, func(string) string { return "" })
		if code != tc.code || !strings.Contains(out.String()+errb.String(), tc.says) {
			t.Errorf("hermes %v: exit %d, want %d saying %q:\n%s%s", tc.args, code, tc.code, tc.says, out.String(), errb.String())
		}
	}
	// chat has no --config, and its help does not say it has.
	var out bytes.Buffer
	run(context.Background(), []string{"chat", "-h"}, nil, &out, &out, func(string) string { return "" })
	if strings.Contains(out.String(), "--config") {
		t.Errorf("hermes chat -h mentions --config:\n%s", out.String())
	}
}
