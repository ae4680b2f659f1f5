// Package secretenv reads secrets from the process environment for tools and MCP servers, but
// only from the variables the operator allowed (--secret-env-allow). A tool spec or server spec
// comes from an API caller or a store; without the allowlist it could name HERMES_MODEL_API_KEY
// and have the secret sent to its own URL.
package secretenv

import (
	"fmt"
	"os"
)

// Reader reads allowed variables.
type Reader struct {
	allow  map[string]bool
	getenv func(string) string
}

// New returns a Reader of the allowed variable names; getenv nil means os.Getenv.
func New(allow []string, getenv func(string) string) *Reader {
	if getenv == nil {
		getenv = os.Getenv
	}
	r := &Reader{allow: map[string]bool{}, getenv: getenv}
	for _, name := range allow {
		r.allow[name] = true
	}
	return r
}

// Allowed reports whether specs may name the variable.
func (r *Reader) Allowed(name string) bool { return r != nil && r.allow[name] }

// NotAllowed is the refusal for a variable outside the allowlist, for validation messages. It
// says nothing about whether the variable exists.
func NotAllowed(name string) string {
	return fmt.Sprintf("the environment variable %q is not on the operator's allowlist of secret variables (--secret-env-allow)", name)
}

// Lookup returns an allowed variable's value. The error for a variable outside the allowlist
// never says whether it exists; an allowed one that is unset or empty is reported as such.
func (r *Reader) Lookup(name string) (string, error) {
	if !r.Allowed(name) {
		return "", fmt.Errorf("%s", NotAllowed(name))
	}
	v := r.getenv(name)
	if v == "" {
		return "", fmt.Errorf("the secret variable %s is not set in the environment of the service", name)
	}
	return v, nil
}
