package mcpgateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hermes-agent/hermes/internal/backoff"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// Task polling bounds: the server's pollInterval is honoured within them.
const (
	taskPollDefault = 500 * time.Millisecond
	taskPollMin     = 50 * time.Millisecond
	taskPollMax     = 5 * time.Second
	taskCancelWait  = 5 * time.Second
)

// taskInfo is an MCP task (2025-11-25) as tasks/get and a task-augmented tools/call return it.
type taskInfo struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage"`
	PollInterval  *int64 `json:"pollInterval"` // milliseconds
}

func (t *taskInfo) terminal() bool {
	switch t.Status {
	case "completed", "failed", "cancelled":
		return true
	}
	return false
}

// callTask runs a tool that requires MCP tasks so that it works like any other call: a
// task-augmented tools/call, tasks/get until the task ends or needs input (its status messages
// reported as progress), then tasks/result. When ctx ends first the task is cancelled on the
// server.
func (g *Gateway) callTask(ctx context.Context, l *live, e *toolEntry, args json.RawMessage, token string, onProgress func(*pb.Progress)) (*mcp.CallToolResult, error) {
	ttl := int64(e.conn.callTimeout / time.Millisecond)
	if dl, ok := ctx.Deadline(); ok {
		ttl = max(int64(time.Until(dl)/time.Millisecond), 1) + int64(taskCancelWait/time.Millisecond)
	}
	params := map[string]any{"name": e.original, "arguments": args, "task": map[string]any{"ttl": ttl}}
	if token != "" {
		params["_meta"] = map[string]any{"progressToken": token}
	}
	raw, err := l.side.call(ctx, l.sess, "tools/call", params)
	if err != nil {
		return nil, err
	}
	var created struct {
		Task *taskInfo `json:"task"`
	}
	if err := json.Unmarshal(raw, &created); err != nil {
		return nil, fmt.Errorf("tools/call as a task: %w", err)
	}
	if created.Task == nil || created.Task.TaskID == "" {
		// The server ran the call at once instead of as a task.
		return decodeToolResult(raw)
	}
	task := created.Task
	steps := 0.0
	lastMsg := ""
	report := func(t *taskInfo) {
		if onProgress == nil || t.StatusMessage == "" || t.StatusMessage == lastMsg {
			return
		}
		lastMsg = t.StatusMessage
		steps++
		onProgress(&pb.Progress{Progress: steps, Message: CleanText(t.StatusMessage, "text/plain", CleanOptions{MaxBytes: 500}).Text})
	}
	report(task)
	for !task.terminal() && task.Status != "input_required" {
		wait := taskPollDefault
		if task.PollInterval != nil {
			wait = min(max(time.Duration(*task.PollInterval)*time.Millisecond, taskPollMin), taskPollMax)
		}
		if !backoff.Sleep(ctx, wait) {
			g.cancelTask(l, e, task.TaskID)
			return nil, ctx.Err()
		}
		raw, err := l.side.call(ctx, l.sess, "tasks/get", map[string]any{"taskId": task.TaskID})
		if err != nil {
			if ctx.Err() != nil {
				g.cancelTask(l, e, task.TaskID)
			}
			return nil, err
		}
		var next taskInfo
		if err := json.Unmarshal(raw, &next); err != nil || next.Status == "" {
			return nil, fmt.Errorf("tasks/get: not a task: %s", abbreviate(string(raw), 200))
		}
		task = &next
		report(task)
	}
	// tasks/result waits for a task that needs input; the server's requests for it (an
	// elicitation) reach the gateway's handlers meanwhile.
	raw, err = l.side.call(ctx, l.sess, "tasks/result", map[string]any{"taskId": task.TaskID})
	if err != nil {
		if ctx.Err() != nil {
			g.cancelTask(l, e, task.TaskID)
		}
		if task.Status == "cancelled" {
			return nil, fmt.Errorf("the server cancelled the task: %s: %w", task.StatusMessage, err)
		}
		return nil, err
	}
	return decodeToolResult(raw)
}

// cancelTask asks the server to cancel a task the caller gave up on; it does not wait long.
func (g *Gateway) cancelTask(l *live, e *toolEntry, id string) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		ctx, cancel := context.WithTimeout(g.ctx, taskCancelWait)
		defer cancel()
		if _, err := l.side.call(ctx, l.sess, "tasks/cancel", map[string]any{"taskId": id}); err != nil {
			g.log.Debug("MCP task not cancelled", "server", e.conn.spec.Name, "tool", e.original, "task", id, "error", err)
		}
	}()
}

// decodeToolResult reads a CallToolResult.
func decodeToolResult(raw json.RawMessage) (*mcp.CallToolResult, error) {
	var res mcp.CallToolResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("the task's result is not a tool result: %w", err)
	}
	if res.Content == nil && res.StructuredContent == nil {
		return nil, errors.New("the task's result is not a tool result")
	}
	return &res, nil
}
