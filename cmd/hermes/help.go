package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/hermes-agent/hermes/app"
	"github.com/hermes-agent/hermes/app/demo"
)

// helpWidth is the width -h output wraps at.
const helpWidth = 100

// flagGroup is a titled group of flags in -h output; key names it for "hermes serve -h <key>".
type flagGroup struct {
	key, title string
	names      []string
}

// serveFlagGroups orders hermes serve's flags for a person: what everyone sets first, then the
// settings shared by every target, then each service's own. A service's group is whatever its
// Config.RegisterFlags registers, so a flag added there shows up in its group; a flag no group
// names is listed under "Other settings", never dropped.
func serveFlagGroups() []flagGroup {
	var c app.Config
	registered := func(register func(*flag.FlagSet)) []string {
		fs := flag.NewFlagSet("", flag.ContinueOnError)
		register(fs)
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		return names
	}
	return []flagGroup{
		{"essentials", "Essentials", []string{
			"listen", "http-listen", "data-dir", "target", "config",
			"model-base-url", "model-api-key", "model", "extract-model", "embed-base-url", "embed-model",
			"redis-url", "nats-url", "qdrant-addr", "auth-file",
		}},
		{"security", "Access and transport security", []string{
			"insecure-no-auth", "service-key-file", "tls-cert", "tls-key", "tls-client-ca", "tls-client-auth",
			"tls-ca", "tls-server-name", "secret-env-allow", "egress-allow", "events-key-file", "events-key",
		}},
		{"backends", "Backends", []string{"redis-prefix", "nats-namespace", "nats-replicas", "nats-port", "tokenizer"}},
		{"ops", "Logs, metrics and shutdown", []string{"log-level", "log-format", "metrics-listen", "health-listen", "shutdown-timeout", "drain-delay"}},
		{"addresses", "Where the other services are (one target per process)", []string{
			"session-addr", "tools-addr", "mcpgateway-addr", "memory-addr", "orchestrator-addr",
		}},
		{"session", "Session service", registered(c.Session.RegisterFlags)},
		{"tools", "Tool service", registered(c.Tools.RegisterFlags)},
		{"mcpgateway", "MCP gateway", registered(c.MCPGateway.RegisterFlags)},
		{"memory", "Memory service", registered(c.Memory.RegisterFlags)},
		{"orchestrator", "Orchestrator", registered(c.Orchestrator.RegisterFlags)},
		{"http", "HTTP/JSON API", registered(c.HTTP.RegisterFlags)},
		{"quota", "Per-user quotas and fair turn scheduling", registered(c.Quota.RegisterFlags)},
	}
}

// envRule says how a command's flags can also be set, truthfully for each command.
func envRule(name string, fs *flag.FlagSet) string {
	switch {
	case name == "serve":
		return "Every flag can also be set by an environment variable — HERMES_ and the flag's name in capitals, " +
			"with - and . as _ (--memory.min-similarity is HERMES_MEMORY_MIN_SIMILARITY) — or as a key of the " +
			"--config YAML file (nested maps join with '.'). Flags win over the environment, which wins over the file."
	case name == "chat":
		return "Every flag can also be set by an environment variable: HERMES_CHAT_ and the flag's name in capitals, " +
			"with - as _ (--addr is HERMES_CHAT_ADDR). Without --addr, HERMES_LISTEN (the address hermes serve listens on) is used."
	}
	rule := ""
	fs.VisitAll(func(f *flag.Flag) {
		if strings.Contains(f.Usage, "[HERMES_") {
			rule = "Every flag can also be set by the environment variable shown in brackets."
		}
	})
	return rule
}

// printHelp writes a command's -h text: what it does, how its flags can be set, and its flags.
// hermes serve has so many that its -h shows the essential ones and a line per group; show
// names a group to list ("all" lists every group).
func printHelp(w io.Writer, name string, fs *flag.FlagSet, show string) {
	fmt.Fprintf(w, "Usage: hermes %s [flags]\n", name)
	for _, c := range commands() {
		if c.name == strings.Fields(name)[0] {
			fmt.Fprintf(w, "\n%s\n", wrap(upperFirst(c.short)+".", helpWidth, ""))
		}
	}
	if rule := envRule(name, fs); rule != "" {
		fmt.Fprintf(w, "\n%s\n", wrap(rule, helpWidth, ""))
	}
	var groups []flagGroup
	if name == "serve" {
		groups = serveFlagGroups()
	}
	// Each flag belongs to the first group naming it; the rest make "other".
	printed := map[string]bool{}
	members := make([][]*flag.Flag, len(groups))
	for i, g := range groups {
		for _, n := range g.names {
			if f := fs.Lookup(n); f != nil && !printed[n] {
				members[i] = append(members[i], f)
				printed[n] = true
			}
		}
	}
	var rest []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if !printed[f.Name] {
			rest = append(rest, f)
		}
	})
	if len(groups) == 0 {
		printFlagGroup(w, "Flags", rest)
		return
	}
	groups = append(groups, flagGroup{key: "other", title: "Other settings"})
	members = append(members, rest)
	if show == "" {
		show = groups[0].key
	}
	var summary []string
	for i, g := range groups {
		switch {
		case show == "all" || show == g.key:
			printFlagGroup(w, g.title, members[i])
		case len(members[i]) > 0:
			summary = append(summary, groupLine(g.key, members[i]))
		}
	}
	if len(summary) > 0 {
		fmt.Fprintf(w, "\nMore settings — hermes %s -h <group> lists a group's, hermes %s -h all every one:\n%s\n", name, name, strings.Join(summary, "\n"))
	}
}

// helpGroupArg finds "-h <group>" in serve's arguments: ok when help was asked for, with the
// group named after it, if any.
func helpGroupArg(args []string) (group string, ok bool) {
	for i, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				return args[i+1], true
			}
			return "", true
		}
	}
	return "", false
}

// isServeHelpGroup reports whether "hermes serve -h <group>" names something to show.
func isServeHelpGroup(group string) bool {
	switch group {
	case "", "all", "other":
		return true
	}
	return slices.ContainsFunc(serveFlagGroups(), func(g flagGroup) bool { return g.key == group })
}

// groupLine is a one-line summary of a group: its key, size and first flags.
func groupLine(key string, flags []*flag.Flag) string {
	names := make([]string, len(flags))
	for i, f := range flags {
		names[i] = "--" + f.Name
	}
	line := fmt.Sprintf("  %-13s%s: ", key, demo.Plural(len(flags), "setting", "settings"))
	for i, n := range names {
		if len([]rune(line))+len(n)+2 > helpWidth {
			return strings.TrimSuffix(line, ", ") + ", …"
		}
		line += n
		if i < len(names)-1 {
			line += ", "
		}
	}
	return line
}

// printFlagGroup writes a group's flags one per line: the flag and its argument, then what it
// does and its default, wrapped.
func printFlagGroup(w io.Writer, title string, flags []*flag.Flag) {
	if len(flags) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s:\n", title)
	const col = 32
	for _, f := range flags {
		arg, usage := flag.UnquoteUsage(f)
		left := "  --" + f.Name
		if len(f.Name) == 1 {
			left = "  -" + f.Name
		}
		if arg != "" {
			left += " " + arg
		}
		if def := defaultText(f); def != "" {
			usage += " (default " + def + ")"
		}
		indent := strings.Repeat(" ", col)
		if len(left) >= col-1 {
			fmt.Fprintf(w, "%s\n%s\n", left, wrap(usage, helpWidth, indent))
			continue
		}
		fmt.Fprintf(w, "%-*s%s\n", col, left, strings.TrimPrefix(wrap(usage, helpWidth, indent), indent))
	}
}

// defaultText is a flag's default as a person would type it, empty for the zero value.
func defaultText(f *flag.Flag) string {
	switch f.DefValue {
	case "", "0", "0s", "false", "[]":
		return ""
	}
	if strings.ContainsAny(f.DefValue, " ,") {
		return fmt.Sprintf("%q", f.DefValue)
	}
	return f.DefValue
}

// wrap breaks text into lines of at most width runes, each starting with indent.
func wrap(text string, width int, indent string) string {
	var lines []string
	line := indent
	for _, word := range strings.Fields(text) {
		if line != indent && len([]rune(line))+1+len([]rune(word)) > width {
			lines = append(lines, line)
			line = indent
		}
		if line != indent {
			line += " "
		}
		line += word
	}
	return strings.Join(append(lines, line), "\n")
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
