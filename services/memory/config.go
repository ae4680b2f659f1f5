package memory

import "flag"

// Config holds the memory service's settings; each is a flag under "memory." with an environment
// variable and a YAML key (see pkg/config).
type Config struct{}

// RegisterFlags registers the settings with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {}
