package mcpgateway

import (
	"fmt"
	"sync"

	"github.com/hermes-agent/hermes/internal/errclass"
	"github.com/hermes-agent/hermes/internal/secretenv"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// powers are the operator's allowlists of what a server spec may make the gateway do: run a
// command (stdio servers) and read a secret from the environment (bearer_token_env, OAuth
// client_secret_env). They are checked wherever a spec enters — AddServer, specs read back from
// the shared store (anyone with write access to Redis could put one there) — and again where
// the secret is read. The servers file given at start is operator configuration: its commands
// and variables are allowed as well.
type powers struct {
	secrets *secretenv.Reader

	// mu guards the sets, which allowFile extends once at start.
	mu       sync.Mutex
	commands map[string]bool
	fileEnv  map[string]bool
}

func newPowers(stdioAllow []string, secrets *secretenv.Reader) *powers {
	p := &powers{secrets: secrets, commands: map[string]bool{}, fileEnv: map[string]bool{}}
	for _, c := range stdioAllow {
		p.commands[c] = true
	}
	return p
}

// allowFile allows what the servers file's specs use.
func (p *powers) allowFile(specs []*pb.ServerSpec) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range specs {
		if st := s.GetStdio(); st != nil {
			p.commands[st.GetCommand()] = true
		}
		for _, e := range secretVars(s) {
			p.fileEnv[e] = true
		}
	}
}

// secretVars lists the environment variables a spec reads secrets from.
func secretVars(s *pb.ServerSpec) []string {
	var out []string
	if ht := s.GetHttp(); ht != nil {
		if e := ht.GetBearerTokenEnv(); e != "" {
			out = append(out, e)
		}
		for _, e := range []string{ht.GetOauth().GetClientSecretEnv(), ht.GetOauth().GetPrivateKeyEnv(), ht.GetOauth().GetAssertionEnv(), ht.GetUserOauth().GetClientSecretEnv(),
			ht.GetEnterpriseOauth().GetClientSecretEnv(), ht.GetEnterpriseOauth().GetIdpClientSecretEnv()} {
			if e != "" {
				out = append(out, e)
			}
		}
	}
	return out
}

func (p *powers) envAllowed(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fileEnv[name] || p.secrets.Allowed(name)
}

// check refuses a spec that uses a power the operator did not allow.
func (p *powers) check(field string, s *pb.ServerSpec) error {
	if st := s.GetStdio(); st != nil {
		p.mu.Lock()
		ok := p.commands[st.GetCommand()]
		p.mu.Unlock()
		if !ok {
			return errclass.Errorf(errclass.Denied, "%s.stdio.command %q is not on the operator's allowlist of stdio MCP commands (--mcpgateway.stdio-allow)", field, abbreviate(st.GetCommand(), 200))
		}
	}
	for _, e := range secretVars(s) {
		if !p.envAllowed(e) {
			return errclass.Errorf(errclass.Denied, "%s: %s", field, secretenv.NotAllowed(e))
		}
	}
	return nil
}

// secret reads an allowed variable; getenv reads the gateway's environment.
func (p *powers) secret(name string, getenv func(string) string) (string, error) {
	if !p.envAllowed(name) {
		return "", fmt.Errorf("%s", secretenv.NotAllowed(name))
	}
	v := getenv(name)
	if v == "" {
		return "", fmt.Errorf("the secret variable %s is not set in the gateway's environment", name)
	}
	return v, nil
}
