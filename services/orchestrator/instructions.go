package orchestrator

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// ServerLister lists the MCP gateway's servers, with the instructions each gave in its
// initialize result.
type ServerLister interface {
	ListServers(ctx context.Context, in *mcpgatewayv1.ListServersRequest, opts ...grpc.CallOption) (*mcpgatewayv1.ListServersResponse, error)
}

// Gateway is what the orchestrator needs of the MCP gateway: server instructions, and the
// delivery of the user's answers to servers' requests for input.
type Gateway interface {
	ServerLister
	AnswerElicitation(ctx context.Context, in *mcpgatewayv1.AnswerElicitationRequest, opts ...grpc.CallOption) (*mcpgatewayv1.AnswerElicitationResponse, error)
}

// instructionsTTL is how long a fetched set of server instructions is used before the gateway
// is asked again: servers connect and reconnect rarely, turns start often.
const instructionsTTL = 15 * time.Second

// serverInstructions adds the instructions of the MCP servers the operator chose
// (--orchestrator.mcp-instructions) to the system prompt. A server's instructions are its own
// text, not the operator's, so they enter the prompt only when named: "*" names every server.
type serverInstructions struct {
	names   []string
	servers ServerLister
	now     func() time.Time
	log     *slog.Logger

	mu      sync.Mutex // guards text and fetched
	text    string     // the block for the system prompt; empty when no chosen server gave any
	fetched time.Time  // when text was fetched; zero before the first fetch
}

// block is the text to add to the system prompt, fetched from the gateway at most every
// instructionsTTL. When the gateway cannot be reached the last block is kept: a turn never
// fails because of it.
func (si *serverInstructions) block(ctx context.Context) string {
	if si == nil || len(si.names) == 0 || si.servers == nil {
		return ""
	}
	si.mu.Lock()
	defer si.mu.Unlock()
	if !si.fetched.IsZero() && si.now().Sub(si.fetched) < instructionsTTL {
		return si.text
	}
	si.fetched = si.now()
	fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := si.servers.ListServers(fctx, &mcpgatewayv1.ListServersRequest{})
	if err != nil {
		si.log.Warn("MCP server instructions not refreshed; the last ones are used", "error", err)
		return si.text
	}
	si.text = renderInstructions(resp.GetServers(), si.names)
	return si.text
}

// renderInstructions is the prompt block of the chosen servers' instructions, in name order.
func renderInstructions(servers []*mcpgatewayv1.Server, names []string) string {
	all := slices.Contains(names, "*")
	var parts []string
	for _, s := range servers {
		name, text := s.GetSpec().GetName(), strings.TrimSpace(s.GetInstructions())
		if text == "" || (!all && !slices.Contains(names, name)) {
			continue
		}
		parts = append(parts, fmt.Sprintf("Instructions of the MCP server %q for its tools:\n%s", name, text))
	}
	slices.Sort(parts)
	return strings.Join(parts, "\n\n")
}
