package mcpgateway

import (
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"

	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"google.golang.org/protobuf/types/known/durationpb"
)

// toolEntry is a discovered tool the gateway has claimed a namespaced name for.
type toolEntry struct {
	name, original string
	conn           *serverConn
	description    string
	inputSchema    string
	outputSchema   string
	outSchema      *jsonschema.Schema
	spec           *toolsv1.ToolSpec
}

func (e *toolEntry) proto() *pb.MCPTool {
	return &pb.MCPTool{
		Name:         e.name,
		OriginalName: e.original,
		Server:       e.conn.spec.Name,
		Description:  e.description,
		InputSchema:  e.inputSchema,
		OutputSchema: e.outputSchema,
	}
}

// listTools reads the server's whole tool list.
func (c *serverConn) listTools(ctx context.Context, sess *mcp.ClientSession) error {
	var tools []*mcp.Tool
	for t, err := range sess.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("tools/list: %w", err)
		}
		if t == nil {
			continue
		}
		if len(tools) == maxToolsPerServer {
			break
		}
		tools = append(tools, t)
	}
	c.mu.Lock()
	c.listing = tools
	c.mu.Unlock()
	return nil
}

// applyListing maps the last listing to namespaced names and claims them, reporting filtered
// tools, schemas that are not object schemas, and collisions (within the server, with other
// servers) instead of letting any tool replace another.
func (c *serverConn) applyListing() {
	c.mu.Lock()
	listing := slices.Clone(c.listing)
	c.mu.Unlock()
	slices.SortFunc(listing, func(a, b *mcp.Tool) int { return strings.Compare(a.Name, b.Name) })

	desc := CleanOptions{MaxBytes: 4096, CompactJSONOver: -1}
	next := map[string]*toolEntry{}
	var skipped []*pb.SkippedTool
	var warnings []string
	skip := func(original, name, reason string) {
		skipped = append(skipped, &pb.SkippedTool{OriginalName: original, Name: name, Reason: reason})
	}
	g := c.g
	g.mu.Lock()
	for _, t := range listing {
		name := ToolName(c.spec.Prefix, t.Name)
		if ok, why := c.filter.allows(t.Name); !ok {
			skip(t.Name, name, why)
			continue
		}
		in, err := objectSchema(t.InputSchema)
		if err != nil {
			skip(t.Name, name, "input schema refused: "+err.Error())
			continue
		}
		var out string
		var outSchema *jsonschema.Schema
		if t.OutputSchema != nil {
			out, err = objectSchema(t.OutputSchema)
			if err == nil {
				outSchema, err = compileSchema(out)
			}
			if err != nil {
				warnings = append(warnings, fmt.Sprintf("%s: output schema not enforced: %v", t.Name, err))
				out, outSchema = "", nil
			}
		}
		if prev, ok := next[name]; ok {
			skip(t.Name, name, fmt.Sprintf("its name collides with %q of the same server (both become %s)", prev.original, name))
			continue
		}
		if owner, ok := g.tools[name]; ok && owner.conn != c {
			skip(t.Name, name, fmt.Sprintf("its name collides with %q of server %q", owner.original, owner.conn.spec.Name))
			continue
		}
		description := CleanText(t.Description, "text/plain", desc).Text
		if description == "" {
			description = CleanText(t.Title, "text/plain", desc).Text
		}
		if description == "" {
			description = fmt.Sprintf("Tool %s of the MCP server %s.", t.Name, c.spec.Name)
		}
		e := &toolEntry{name: name, original: t.Name, conn: c, description: description, inputSchema: in, outputSchema: out, outSchema: outSchema}
		e.spec = c.toolSpec(e, t)
		next[name] = e
	}
	c.mu.Lock()
	prev := c.tools
	c.tools, c.skipped, c.warnings = next, skipped, warnings
	c.mu.Unlock()
	for name, e := range prev {
		if g.tools[name] == e {
			delete(g.tools, name)
		}
	}
	for name, e := range next {
		g.tools[name] = e
	}
	g.mu.Unlock()
}

// toolSpec is the tool service's contract for a discovered tool.
func (c *serverConn) toolSpec(e *toolEntry, t *mcp.Tool) *toolsv1.ToolSpec {
	groups := []string{c.spec.Prefix}
	for _, gr := range c.spec.Groups {
		if !slices.Contains(groups, gr) {
			groups = append(groups, gr)
		}
	}
	labels := map[string]string{"mcp.server": c.spec.Name, "mcp.tool": t.Name}
	if t.Title != "" {
		labels["mcp.title"] = abbreviate(t.Title, 200)
	}
	if a := t.Annotations; a != nil {
		if a.ReadOnlyHint {
			labels["mcp.read_only"] = "true"
		}
		if a.IdempotentHint {
			labels["mcp.idempotent"] = "true"
		}
		if a.DestructiveHint != nil {
			labels["mcp.destructive"] = fmt.Sprint(*a.DestructiveHint)
		}
		if a.OpenWorldHint != nil {
			labels["mcp.open_world"] = fmt.Sprint(*a.OpenWorldHint)
		}
	}
	// The server's idempotentHint ("calling again with the same arguments has no further
	// effect") is what the tool service's idempotency protection needs: calls with one key run once.
	idempotent := t.Annotations != nil && t.Annotations.IdempotentHint
	return &toolsv1.ToolSpec{
		Idempotent:   idempotent,
		Name:         e.name,
		Description:  e.description,
		InputSchema:  e.inputSchema,
		OutputSchema: e.outputSchema,
		Timeout:      durationpb.New(c.callTimeout),
		Groups:       groups,
		Executor:     &toolsv1.ToolSpec_Mcp{Mcp: &toolsv1.MCPExecutor{Server: c.spec.Name, Tool: t.Name}},
		Labels:       labels,
	}
}
