package tools

import "flag"

// Config holds the tools service's settings; each is a flag under "tools." with an environment
// variable and a YAML key (see pkg/config).
type Config struct{}

// RegisterFlags registers the settings with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {}
