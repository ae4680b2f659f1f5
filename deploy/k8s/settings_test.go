package k8s_test

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/hermes-agent/hermes/app"
	"github.com/hermes-agent/hermes/internal/config"
)

// settings are the settings `hermes serve` has, read from the binary's own flag registration,
// so a manifest that uses a setting the binary does not have (or a value it would refuse) fails
// here rather than at start-up in a cluster.
type settings struct {
	fs    *flag.FlagSet
	byEnv map[string]*flag.Flag
}

func newSettings() *settings {
	fs := flag.NewFlagSet("hermes serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	registerFlags(fs)
	s := &settings{fs: fs, byEnv: map[string]*flag.Flag{}}
	fs.VisitAll(func(f *flag.Flag) { s.byEnv[config.EnvName(f.Name)] = f })
	return s
}

// validEnv checks a HERMES_* variable: it must be a setting, and its value (when the render
// knows it) must parse as that setting.
func (s *settings) validEnv(name, value string, known bool) error {
	f, ok := s.byEnv[name]
	if !ok {
		return errors.New("not a setting of hermes serve (see internal/config and the services' Config.RegisterFlags)")
	}
	if !known {
		return nil
	}
	return s.parse(f, value)
}

// validFlag checks a command-line flag.
func (s *settings) validFlag(name, value string, hasValue bool) error {
	f := s.fs.Lookup(name)
	if f == nil {
		return errors.New("no such flag")
	}
	if !hasValue {
		if s.isBool(name) {
			return nil
		}
		return errors.New("flag needs a value")
	}
	return s.parse(f, value)
}

func (s *settings) isBool(name string) bool {
	f := s.fs.Lookup(name)
	if f == nil {
		return false
	}
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// parse sets the value on a throwaway copy of the flag set, so checks never change each other.
func (s *settings) parse(f *flag.Flag, value string) error {
	fresh := newSettingsFlagSet()
	if err := fresh.Lookup(f.Name).Value.Set(value); err != nil {
		return fmt.Errorf("invalid value %q: %w", value, err)
	}
	return nil
}

func newSettingsFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("hermes serve", flag.ContinueOnError)
	registerFlags(fs)
	return fs
}

// registerFlags registers exactly what `hermes serve` registers.
func registerFlags(fs *flag.FlagSet) {
	var cfg app.Config
	cfg.RegisterFlags(fs)
}

// duration is a duration setting's value in env, or the flag's default.
func (s *settings) duration(flagName string, env map[string]envVar) time.Duration {
	f := s.fs.Lookup(flagName)
	if f == nil {
		return 0
	}
	value := f.DefValue
	if v, ok := env[config.EnvName(flagName)]; ok && v.known {
		value = v.value
	}
	d, err := time.ParseDuration(value)
	if err != nil {
		return 0
	}
	return d
}
