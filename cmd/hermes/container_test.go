package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hermes-agent/hermes/app"
)

// dockerfileEnv returns the variables the Dockerfile's ENV instructions set.
func dockerfileEnv(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	text := strings.ReplaceAll(string(data), "\\\n", " ")
	for line := range strings.SplitSeq(text, "\n") {
		if rest, ok := strings.CutPrefix(line, "ENV "); ok {
			for _, kv := range strings.Fields(rest) {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
		}
	}
	if env["HERMES_LISTEN"] == "" {
		t.Fatal("the Dockerfile sets no HERMES_LISTEN")
	}
	return env
}

// readmeDockerRuns returns the `docker run` commands of README.md's "The container image", each
// as its words (continuation lines joined, quotes dropped).
func readmeDockerRuns(t *testing.T) [][]string {
	t.Helper()
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "## The container image\n")
	if !ok {
		t.Fatal(`README.md has no section "The container image"`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	section = strings.ReplaceAll(section, "\\\n", " ")
	var runs [][]string
	for line := range strings.SplitSeq(section, "\n") {
		if strings.HasPrefix(line, "    docker run ") {
			runs = append(runs, strings.Fields(strings.ReplaceAll(line, `"`, "")))
		}
	}
	if len(runs) < 2 {
		t.Fatalf("README.md shows %d docker run commands, want the one with keys and the one on loopback", len(runs))
	}
	return runs
}

// containerStart runs New with what a container of the image gets from the command: the
// Dockerfile's ENV, the -e variables, the mounted files (auth.yaml gets a real key), the data
// volume, and the arguments after the image (CMD serve without any). Ports become free ones.
func containerStart(t *testing.T, words []string) error {
	t.Helper()
	env := dockerfileEnv(t)
	paths := map[string]string{env["HERMES_DATA_DIR"]: t.TempDir()}
	args := []string{"serve"}
	for i := 2; i < len(words); i++ {
		switch w := words[i]; {
		case w == "-e" && i+1 < len(words):
			k, v, _ := strings.Cut(words[i+1], "=")
			env[k] = v
			i++
		case w == "-v" && i+1 < len(words):
			src, dst, _ := strings.Cut(words[i+1], ":")
			dst, _, _ = strings.Cut(dst, ":")
			if strings.HasSuffix(src, "auth.yaml") {
				f := filepath.Join(t.TempDir(), "auth.yaml")
				if err := os.WriteFile(f, []byte("container-test-key-0123456789abcdef: {role: operator}\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				paths[dst] = f
			} else if _, ok := paths[dst]; !ok {
				t.Fatalf("volume %s at %s: the test knows only the data volume and auth.yaml", src, dst)
			}
			i++
		case w == "-p" || w == "--network":
			i++
		case strings.HasPrefix(w, "-"):
		default: // the image; the rest are its arguments
			if rest := words[i+1:]; len(rest) > 0 {
				args = rest
			}
			i = len(words)
		}
	}
	for k, v := range env {
		if p, ok := paths[v]; ok {
			env[k] = p
		}
	}
	host, _, err := net.SplitHostPort(env["HERMES_LISTEN"])
	if err != nil {
		t.Fatal(err)
	}
	env["HERMES_LISTEN"] = net.JoinHostPort(host, "0")
	cfg, err := loadServeConfig("serve", &cliEnv{stdout: io.Discard, stderr: io.Discard, getenv: func(k string) string { return env[k] }}, args[1:])
	if err != nil {
		return err
	}
	a, err := app.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	return a.Stop()
}

// TestContainerStartsAsDocumented: the image listens on every interface, so it starts with the
// keys mounted or on loopback as README.md shows, and with neither refuses, saying why.
func TestContainerStartsAsDocumented(t *testing.T) {
	for _, run := range readmeDockerRuns(t) {
		t.Run(strings.Join(run[2:], " "), func(t *testing.T) {
			if err := containerStart(t, run); err != nil {
				t.Fatalf("%s: %v", strings.Join(run, " "), err)
			}
		})
	}
	err := containerStart(t, strings.Fields("docker run --rm --read-only -p 7070:7070 hermes:dev"))
	if err == nil || !regexp.MustCompile(`refusing to listen on 0\.0\.0\.0:0 .*--auth-file`).MatchString(err.Error()) {
		t.Errorf("the image without keys: %v, want a refusal that names --auth-file", err)
	}
}
