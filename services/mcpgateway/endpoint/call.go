package endpoint

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/errclass"
	"github.com/hermes-agent/hermes/internal/rpc"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// serviceError is the result of a call the tool service did not answer.
func serviceError(err error) *mcp.CallToolResult {
	st := status.Convert(err)
	switch rpc.ClassOf(err) {
	case errclass.Unavailable:
		return errorResult(fmt.Sprintf("The Hermes tool service is unavailable (%s); the tool may not have run. Try again shortly.", st.Message()))
	case context.DeadlineExceeded, context.Canceled:
		return errorResult(fmt.Sprintf("The call to the Hermes tool service ended before it answered (%s); the tool may have run.", st.Message()))
	default:
		return errorResult(fmt.Sprintf("The Hermes tool service failed (%s): %s", st.Code(), st.Message()))
	}
}

// elicitMissing asks the client's user, through MCP elicitation, for the required arguments a
// call left out, and returns the arguments with the answers added. Arguments the caller gave
// are never replaced. It changes nothing when it is switched off, the client cannot elicit,
// nothing is missing, or a missing argument is not a simple value a form can ask for; then, and
// when the user declines, the tool service answers with its usual validation message.
func (s *Server) elicitMissing(ctx context.Context, req *mcp.CallToolRequest, name string, st *servedTool, args string) string {
	if !s.cfg.ElicitMissing || len(st.required) == 0 || req.Session == nil {
		return args
	}
	// A client that declared elicitation with only the url mode cannot show a form.
	if ip := req.Session.InitializeParams(); ip == nil || ip.Capabilities == nil || ip.Capabilities.Elicitation == nil ||
		ip.Capabilities.Elicitation.Form == nil && ip.Capabilities.Elicitation.URL != nil {
		return args
	}
	var given map[string]json.RawMessage
	if json.Unmarshal([]byte(args), &given) != nil || given == nil {
		return args
	}
	var missing []string
	props := map[string]json.RawMessage{}
	for _, k := range st.required {
		if _, ok := given[k]; ok {
			continue
		}
		p, ok := st.props[k]
		if !ok || !elicitable(p) {
			return args
		}
		missing = append(missing, k)
		props[k] = p
	}
	if len(missing) == 0 || len(missing) > maxElicitProperties {
		return args
	}
	ectx, cancel := context.WithTimeout(ctx, elicitTimeout)
	defer cancel()
	res, err := req.Session.Elicit(ectx, &mcp.ElicitParams{
		Message:         fmt.Sprintf("The tool %s was called without %s, which it needs. Please provide %s.", name, strings.Join(missing, ", "), plural(len(missing), "it", "them")),
		RequestedSchema: map[string]any{"type": "object", "properties": props, "required": missing},
	})
	if err != nil {
		s.log.Debug("MCP endpoint: elicitation of missing arguments failed", "tool", name, "error", err)
		return args
	}
	if res.Action != "accept" {
		return args
	}
	for _, k := range missing {
		if v, ok := res.Content[k]; ok {
			if b, err := json.Marshal(v); err == nil {
				given[k] = b
			}
		}
	}
	out, err := json.Marshal(given)
	if err != nil {
		return args
	}
	return string(out)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// elicitable reports whether a property schema is one MCP elicitation can ask for: a string,
// number, integer or boolean (enums included), or an array of enumerated strings.
func elicitable(raw json.RawMessage) bool {
	var p struct {
		Type       any             `json:"type"`
		Properties json.RawMessage `json:"properties"`
		Items      *struct {
			Enum  []any `json:"enum"`
			AnyOf []any `json:"anyOf"`
			OneOf []any `json:"oneOf"`
		} `json:"items"`
	}
	if json.Unmarshal(raw, &p) != nil || p.Properties != nil {
		return false
	}
	switch p.Type {
	case "string", "number", "integer", "boolean":
		return true
	case "array":
		return p.Items != nil && (len(p.Items.Enum) > 0 || len(p.Items.AnyOf) > 0 || len(p.Items.OneOf) > 0)
	}
	return false
}

// callReport tells the client how a call goes while it runs: progress notifications (when the
// request carried a progressToken) at the start, every ProgressInterval and at the end, with
// the seconds elapsed as the progress value; and log messages (at the level the client set):
// the start and each interval at debug, the outcome at info or warning, coercions at notice.
type callReport struct {
	s       *Server
	ctx     context.Context
	session *mcp.ServerSession
	token   any
	name    string
	start   time.Time
	stop    chan struct{}
	done    chan struct{}
	// last is the last progress value sent; one goroutine at a time touches it: the caller's
	// in startReport, then loop's, then the caller's again in finish once loop has ended.
	last float64
}

func (s *Server) startReport(ctx context.Context, req *mcp.CallToolRequest, name string) *callReport {
	r := &callReport{s: s, ctx: ctx, session: req.Session, name: name, start: time.Now(),
		stop: make(chan struct{}), done: make(chan struct{}), last: -1}
	if req.Params != nil {
		r.token = req.Params.GetProgressToken()
	}
	r.log(mcp.LoggingLevel("debug"), fmt.Sprintf("calling tool %s", name))
	r.progress(fmt.Sprintf("calling %s", name))
	go r.loop()
	return r
}

func (r *callReport) loop() {
	defer close(r.done)
	t := time.NewTicker(r.s.cfg.ProgressInterval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-r.ctx.Done():
			return
		case <-t.C:
			msg := fmt.Sprintf("tool %s still running after %s", r.name, time.Since(r.start).Round(time.Millisecond))
			r.progress(msg)
			r.log(mcp.LoggingLevel("debug"), msg)
		}
	}
}

// finish stops the interval reports and sends the last ones; nothing is sent after it returns.
func (r *callReport) finish(res *toolsv1.ToolResult, err error) {
	close(r.stop)
	<-r.done
	took := time.Since(r.start).Round(time.Millisecond)
	for _, c := range res.GetCoercions() {
		r.log(mcp.LoggingLevel("notice"), fmt.Sprintf("tool %s: argument %s was converted from %s to %s", r.name, orWhole(c.GetPointer()), c.GetFrom(), c.GetTo()))
	}
	switch {
	case err != nil:
		r.log(mcp.LoggingLevel("warning"), fmt.Sprintf("tool %s: the tool service did not answer after %s: %s", r.name, took, status.Convert(err).Message()))
	case res.GetSuccess():
		r.log(mcp.LoggingLevel("info"), fmt.Sprintf("tool %s succeeded after %s (%d %s)", r.name, took, res.GetAttempts(), plural(int(res.GetAttempts()), "attempt", "attempts")))
	default:
		r.log(mcp.LoggingLevel("warning"), fmt.Sprintf("tool %s failed after %s: %s", r.name, took, res.GetError().GetCode()))
	}
	if res.GetMayHaveRun() {
		r.log(mcp.LoggingLevel("warning"), fmt.Sprintf("tool %s was retried after a timeout, so it may have run more than once", r.name))
	}
	if res.GetTruncated() {
		r.log(mcp.LoggingLevel("warning"), fmt.Sprintf("tool %s: the output (%d bytes) was cut to a preview", r.name, res.GetOutputBytes()))
	}
	r.progress(fmt.Sprintf("%s finished", r.name))
}

func orWhole(p string) string {
	if p == "" {
		return "(the arguments)"
	}
	return p
}

func (r *callReport) progress(msg string) {
	if r.token == nil || r.session == nil {
		return
	}
	p := 0.0
	if r.last >= 0 {
		// Progress must increase with every notification.
		p = max(time.Since(r.start).Seconds(), r.last+0.001)
	}
	r.last = p
	if err := r.session.NotifyProgress(r.ctx, &mcp.ProgressNotificationParams{ProgressToken: r.token, Progress: p, Message: msg}); err != nil {
		r.s.log.Debug("MCP endpoint: progress notification not sent", "tool", r.name, "error", err)
	}
}

func (r *callReport) log(level mcp.LoggingLevel, msg string) {
	if r.session == nil {
		return
	}
	if err := r.session.Log(r.ctx, &mcp.LoggingMessageParams{Level: level, Logger: "hermes", Data: msg}); err != nil {
		r.s.log.Debug("MCP endpoint: log notification not sent", "tool", r.name, "error", err)
	}
}
