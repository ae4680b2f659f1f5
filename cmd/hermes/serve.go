package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"runtime"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/hermes-agent/hermes/app"
	"github.com/hermes-agent/hermes/internal/config"
	"github.com/hermes-agent/hermes/internal/telemetry"
)

// loadServeConfig parses the serve flags with environment and config-file fallbacks.
func loadServeConfig(name string, env *cliEnv, args []string) (app.Config, error) {
	var cfg app.Config
	fs := newFlagSet(name)
	cfg.RegisterFlags(fs)
	if group, ok := helpGroupArg(args); ok {
		if !isServeHelpGroup(group) {
			return cfg, errUsage{fmt.Sprintf("no settings group %q (run hermes %s -h)", group, name)}
		}
		printHelp(env.stdout, name, fs, group)
		return cfg, flag.ErrHelp
	}
	if err := config.Load(fs, args, env.getenv, "config"); err != nil {
		return cfg, parseErr(name, fs, env, err)
	}
	if fs.NArg() > 0 {
		return cfg, errUsage{fmt.Sprintf("unexpected argument %q (run hermes %s -h)", fs.Arg(0), name)}
	}
	if _, err := app.ParseTargets(cfg.Target); err != nil {
		return cfg, errUsage{fmt.Sprintf("--target: %v", err)}
	}
	if cfg.ModelAPIKey == "" {
		cfg.ModelAPIKey = cfg.APIKey(env.getenv)
	}
	cfg.Version = versionString()
	return cfg, nil
}

func runServe(ctx context.Context, env *cliEnv, args []string) error {
	cfg, err := loadServeConfig("serve", env, args)
	if err != nil {
		return err
	}
	runtime.MemProfileRate = memProfileRate(cfg.PprofListen, runtime.MemProfileRate)
	log, err := telemetry.NewLogger(env.stderr, cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return errUsage{err.Error()}
	}
	// go-redis logs connection failures through a package-level logger; send them to ours at
	// debug level: the errors reach the caller anyway.
	redis.SetLogger(redisLogger{log})
	build := readBuildInfo()
	log.Info("hermes starting", build.logAttrs()...)
	serviceName := "hermes"
	if cfg.Target != app.TargetAll {
		serviceName = "hermes-" + strings.ReplaceAll(cfg.Target, ",", "-")
	}
	guard, err := cfg.HTTP.Guard(log.With("component", "metrics"))
	if err != nil {
		return errUsage{err.Error()}
	}
	tel, err := telemetry.Setup(ctx, telemetry.Options{ServiceName: serviceName, Version: cfg.Version, Revision: build.shortRevision(), MetricsListen: cfg.MetricsListen, Logger: log,
		Middleware: guard.Wrap})
	if err != nil {
		return err
	}
	defer func() { _ = tel.Shutdown(context.WithoutCancel(ctx)) }()
	a, err := app.New(ctx, cfg, log)
	if err != nil {
		return err
	}
	tel.Handle("/readyz", a.ReadyHandler())
	// Built: what starting touched of the binary need not stay resident (issue 25, stop 33).
	if released, err := releaseStartupPages(); err != nil {
		log.Warn("startup pages stay resident", "err", err)
	} else {
		log.Debug("startup pages released", "bytes", released)
	}
	return a.Run(ctx)
}

// memProfileRate is the runtime's heap profiling rate for a server whose profiler listens on
// pprofListen, given the rate it runs at. Only the profiler serves the heap profile, so without
// it sampling stops: each sampled allocation's stack is unwound and recorded in a bucket of the
// profiler's, outside the heap, and the buckets and their 1.4 MB hash table stay resident (peak
// RSS about 2 MiB lower at 64 turns at once with sampling off from the start, and within 1 MiB
// of that when it stops here; issue 25, stop 36). The samples package initialisation took
// stay, unread.
func memProfileRate(pprofListen string, rate int) int {
	if pprofListen == "" {
		return 0
	}
	return rate
}

// redisLogger adapts slog to go-redis' logger interface.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}
