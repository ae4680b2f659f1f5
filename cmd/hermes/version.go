package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

// version overrides the module version at build time: -ldflags "-X main.version=v1.2.3".
var version = ""

// buildInfo is what the binary knows of its own build, from the Go toolchain's build info.
type buildInfo struct {
	// Version is the module version (a tag, or a pseudo-version for an untagged commit), "dev"
	// when the toolchain recorded none (go run, go test).
	Version string
	// Revision is the VCS commit, empty when not built from a checkout.
	Revision string
	// Time is the commit's time (vcs.time), the build info's only timestamp.
	Time string
	// Modified reports uncommitted changes in the checkout it was built from.
	Modified  bool
	GoVersion string
	Platform  string
}

func readBuildInfo() buildInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return buildInfoFrom(bi, version)
}

// buildInfoFrom reads the toolchain's build info (nil when there is none); override, when set,
// is the version.
func buildInfoFrom(bi *debug.BuildInfo, override string) buildInfo {
	b := buildInfo{Version: override, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Revision = s.Value
			case "vcs.time":
				b.Time = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if b.Version == "" {
		b.Version = "dev"
	}
	return b
}

// versionString is the version alone, for telemetry and MCP's server info.
func versionString() string { return readBuildInfo().Version }

// logAttrs are the build's attributes for the start-up log line.
func (b buildInfo) logAttrs() []any {
	return []any{"version", b.Version, "revision", b.shortRevision(), "commit_time", b.Time, "go", b.GoVersion}
}

// shortRevision is the revision with "-modified" when the checkout had uncommitted changes, or
// "unknown".
func (b buildInfo) shortRevision() string {
	if b.Revision == "" {
		return "unknown"
	}
	if b.Modified {
		return b.Revision + "-modified"
	}
	return b.Revision
}

func runVersion(_ context.Context, env *cliEnv, args []string) error {
	if len(args) > 0 {
		return errUsage{fmt.Sprintf("unexpected argument %q (hermes version takes none)", args[0])}
	}
	b := readBuildInfo()
	fmt.Fprintf(env.stdout, "hermes %s\n", b.Version)
	fmt.Fprintf(env.stdout, "  revision     %s\n", b.shortRevision())
	if b.Time != "" {
		fmt.Fprintf(env.stdout, "  commit time  %s\n", b.Time)
	}
	fmt.Fprintf(env.stdout, "  go           %s %s\n", b.GoVersion, b.Platform)
	return nil
}
