package mcpgateway

import (
	"encoding/json"

	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"

	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"google.golang.org/protobuf/proto"
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
	taskSupport    string // "", "optional" or "required"
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
		TaskSupport:  e.taskSupport,
	}
}

// listTools reads the server's whole tool list. It is read through the side channel, which
// keeps each tool's execution.taskSupport (the SDK drops it); when that fails the SDK lists
// (and task-only tools then fail when called, with the server's message).
func (c *serverConn) listTools(ctx context.Context, l *live) error {
	tools, tasks, err := listToolsRaw(ctx, l)
	if err != nil && ctx.Err() == nil {
		c.g.log.Debug("MCP server: tools/list on the side channel failed; listing through the SDK", "server", c.spec.Name, "error", err)
		tools, tasks, err = nil, nil, nil
		for t, lerr := range l.sess.Tools(ctx, nil) {
			if lerr != nil {
				err = lerr
				break
			}
			if t == nil {
				continue
			}
			if len(tools) == maxToolsPerServer {
				break
			}
			tools = append(tools, t)
		}
	}
	if err != nil {
		return fmt.Errorf("tools/list: %w", err)
	}
	c.mu.Lock()
	c.listing, c.tasks = tools, tasks
	c.mu.Unlock()
	return nil
}

// listToolsRaw pages through tools/list on the side channel.
func listToolsRaw(ctx context.Context, l *live) ([]*mcp.Tool, map[string]string, error) {
	var tools []*mcp.Tool
	tasks := map[string]string{}
	cursor := ""
	for page := 0; page < 100 && len(tools) < maxToolsPerServer; page++ {
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		raw, err := l.side.call(ctx, l.sess, "tools/list", params)
		if err != nil {
			return nil, nil, err
		}
		var res struct {
			Tools      []json.RawMessage `json:"tools"`
			NextCursor string            `json:"nextCursor"`
		}
		if err := json.Unmarshal(raw, &res); err != nil {
			return nil, nil, err
		}
		for _, rt := range res.Tools {
			var t mcp.Tool
			var x struct {
				Execution struct {
					TaskSupport string `json:"taskSupport"`
				} `json:"execution"`
			}
			if json.Unmarshal(rt, &t) != nil || json.Unmarshal(rt, &x) != nil {
				continue // applyListing reports tools it cannot use; this one cannot even be named
			}
			if ts := x.Execution.TaskSupport; ts != "" && ts != "forbidden" {
				tasks[t.Name] = ts
			}
			if len(tools) < maxToolsPerServer {
				tools = append(tools, &t)
			}
		}
		if res.NextCursor == "" {
			return tools, tasks, nil
		}
		cursor = res.NextCursor
	}
	return tools, tasks, nil
}

// applyListing maps the last listing to namespaced names and claims them, reporting filtered
// tools, schemas that are not object schemas, and collisions (within the server, with other
// servers) instead of letting any tool replace another.
func (c *serverConn) applyListing() {
	c.mu.Lock()
	listing := slices.Clone(c.listing)
	tasks := c.tasks
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
		e := &toolEntry{name: name, original: t.Name, conn: c, description: description, inputSchema: in, outputSchema: out, outSchema: outSchema, taskSupport: tasks[t.Name]}
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
		labels["mcp.title"] = abbreviate(t.Title, 200) // Hermes' MCP endpoint re-exports it
	}
	if e.taskSupport != "" {
		labels["mcp.task_support"] = e.taskSupport
	}
	ann := toolAnnotations(t)
	// The server's idempotentHint ("calling again with the same arguments has no further
	// effect") is what the tool service's idempotency protection needs: calls with one key run once.
	idempotent := ann.GetIdempotentHint()
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
		Annotations:  ann,
	}
}

// toolAnnotations keeps what a tool declares about its behaviour, as the server said it: a hint
// the server left out stays unset. A title is cleaned like descriptions.
func toolAnnotations(t *mcp.Tool) *toolsv1.ToolAnnotations {
	a := t.Annotations
	title := t.Title
	if a != nil && a.Title != "" {
		title = a.Title
	}
	if a == nil && title == "" {
		return nil
	}
	out := &toolsv1.ToolAnnotations{}
	if title != "" {
		out.Title = proto.String(CleanText(title, "text/plain", CleanOptions{MaxBytes: 200}).Text)
	}
	if a != nil {
		// The SDK reads readOnlyHint and idempotentHint as plain booleans: false and absent are
		// the same, and both mean what MCP's default means.
		if a.ReadOnlyHint {
			out.ReadOnlyHint = proto.Bool(true)
		}
		if a.IdempotentHint {
			out.IdempotentHint = proto.Bool(true)
		}
		out.DestructiveHint = a.DestructiveHint
		out.OpenWorldHint = a.OpenWorldHint
	}
	return out
}
