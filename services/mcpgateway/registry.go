package mcpgateway

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/errclass"
	"github.com/hermes-agent/hermes/internal/rpc"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// Registry is the tool service as the gateway uses it: where discovered tools are registered so
// that the orchestrator can list and execute them like any other tool.
type Registry interface {
	// Register adds or replaces a tool registered from source.
	Register(ctx context.Context, spec *toolsv1.ToolSpec, source string) error
	// Unregister removes a tool; a tool that does not exist is not an error.
	Unregister(ctx context.Context, name, source string) error
	// BySource lists the names of the tools whose source starts with prefix.
	BySource(ctx context.Context, prefix string) (map[string]string, error)
}

// Registration failures that retrying does not fix.
var (
	// errConflict: the tool service refused because the name is taken.
	errConflict = errors.New("name taken in the tool service")
	// errRefused: the tool service refused the spec (for example a schema it cannot compile).
	errRefused = errors.New("spec refused by the tool service")
)

// ToolServiceRegistry registers tools through the ToolService gRPC API. The client is obtained
// lazily, so the gateway can start before the tool service does.
type ToolServiceRegistry struct {
	client func() (toolsv1.ToolServiceClient, error)
}

// NewToolServiceRegistry returns a Registry backed by the ToolService client that client returns.
func NewToolServiceRegistry(client func() (toolsv1.ToolServiceClient, error)) *ToolServiceRegistry {
	return &ToolServiceRegistry{client: client}
}

// Register implements Registry.
func (r *ToolServiceRegistry) Register(ctx context.Context, spec *toolsv1.ToolSpec, source string) error {
	c, err := r.client()
	if err != nil {
		return err
	}
	_, err = c.RegisterTool(ctx, &toolsv1.RegisterToolRequest{Spec: spec, Source: source})
	if err == nil {
		return nil
	}
	switch rpc.ClassOf(err) {
	case errclass.Exists, errclass.Precondition, errclass.Denied:
		return fmt.Errorf("%w: %s", errConflict, status.Convert(err).Message())
	case errclass.Invalid, errclass.Exhausted:
		return fmt.Errorf("%w: %s", errRefused, status.Convert(err).Message())
	}
	return fmt.Errorf("register %s: %w", spec.GetName(), err)
}

// Unregister implements Registry.
func (r *ToolServiceRegistry) Unregister(ctx context.Context, name, source string) error {
	c, err := r.client()
	if err != nil {
		return err
	}
	_, err = c.UnregisterTool(ctx, &toolsv1.UnregisterToolRequest{Name: name, Source: source})
	if err != nil && rpc.ClassOf(err) != errclass.NotFound {
		return fmt.Errorf("unregister %s: %w", name, err)
	}
	return nil
}

// BySource implements Registry: name → source of every tool whose source starts with prefix.
func (r *ToolServiceRegistry) BySource(ctx context.Context, prefix string) (map[string]string, error) {
	c, err := r.client()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	token := ""
	for range 10000 {
		resp, err := c.ListTools(ctx, &toolsv1.ListToolsRequest{PageSize: 1000, PageToken: token})
		if err != nil {
			return nil, fmt.Errorf("list tools: %w", err)
		}
		for _, t := range resp.GetTools() {
			if strings.HasPrefix(t.GetSource(), prefix) {
				out[t.GetSpec().GetName()] = t.GetSource()
			}
		}
		token = resp.GetNextPageToken()
		if token == "" {
			return out, nil
		}
	}
	return nil, errors.New("list tools: too many pages")
}
