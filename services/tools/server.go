// Package tools is the tool service (hermes.tools.v1.ToolService): a schema-first registry
// shared by every replica, strict JSON Schema validation whose failures go back to the model as
// results it can correct, per-tool timeouts capped by the caller's deadline, retries of
// transient failures with backoff and jitter, idempotency keys that run a tool once across
// replicas, and tool selection for turns when many tools are registered.
package tools

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/hermes-agent/hermes/internal/auth"
	"github.com/hermes-agent/hermes/internal/egress"
	"github.com/hermes-agent/hermes/internal/errclass"
	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/secretenv"
	"github.com/hermes-agent/hermes/internal/tokenizer"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// Request limits.
const (
	maxIDBytes        = 256
	maxListFilter     = 1000
	maxSelectText     = 64 << 10
	maxAlwaysInclude  = 100
	defaultPageSize   = 100
	maxPageSize       = 1000
	maxSelectMaxTools = 1000
)

// Options are the tool service's dependencies.
type Options struct {
	// Store keeps the registry and the idempotency records. Required.
	Store Store
	// Tokenizer counts schema tokens. Required.
	Tokenizer *tokenizer.Tokenizer
	// Builtins are the Go tools offered; nil means NewBuiltins(Config, Egress).
	Builtins *Builtins
	// MCP returns the gateway client for mcp tools, on first use; nil makes them unavailable.
	MCP func() (MCPCaller, error)
	// Egress is the operator's policy for outbound connections of webhooks and http_fetch; nil
	// refuses every loopback, private and link-local address.
	Egress *egress.Policy
	// HTTPClient runs webhook tools; nil means a client through Egress that does not follow
	// redirects.
	HTTPClient *http.Client
	// Secrets reads webhook secrets from the environment variables the operator allowed; nil
	// allows none.
	Secrets *secretenv.Reader
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Service implements hermes.tools.v1.ToolService.
type Service struct {
	toolsv1.UnimplementedToolServiceServer

	cfg      Config
	log      *slog.Logger
	reg      *Registry
	idem     *idempotency
	builtins *Builtins
	sel      selector
	tracer   trace.Tracer

	httpExec    executor
	mcpExec     executor
	builtinExec executor
}

// NewService returns the tool service.
func NewService(cfg Config, opts Options) (*Service, error) {
	if opts.Store == nil || opts.Tokenizer == nil {
		return nil, errors.New("tools: a store and a tokenizer are required")
	}
	store := opts.Store
	cfg = cfg.withDefaults()
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Egress == nil {
		opts.Egress = &egress.Policy{}
	}
	if opts.Builtins == nil {
		opts.Builtins = NewBuiltins(cfg, opts.Egress)
	}
	if opts.Secrets == nil {
		opts.Secrets = secretenv.New(nil, nil)
	}
	return &Service{
		cfg:         cfg,
		log:         opts.Logger,
		reg:         NewRegistry(store, opts.Builtins, opts.Tokenizer, cfg.MaxTimeout, specRules{secrets: opts.Secrets, egress: opts.Egress}),
		idem:        newIdempotency(store.Leases(), cfg.IdempotencyTTL, opts.Logger),
		builtins:    opts.Builtins,
		tracer:      otel.Tracer("github.com/hermes-agent/hermes/services/tools"),
		httpExec:    newHTTPExecutor(opts.HTTPClient, opts.Egress, opts.Secrets, cfg.MaxResponseBytes),
		mcpExec:     &mcpExecutor{connect: opts.MCP},
		builtinExec: &builtinExecutor{builtins: opts.Builtins},
	}, nil
}

// Registry returns the service's registry.
func (s *Service) Registry() *Registry { return s.reg }

// RegisterBuiltins registers every builtin with source "builtin"; a builtin whose spec is
// unchanged keeps its version.
func (s *Service) RegisterBuiltins(ctx context.Context) error {
	for _, name := range s.builtins.names() {
		bt, _ := s.builtins.get(name)
		if _, _, err := s.reg.Register(ctx, bt.Spec, SourceBuiltin, true); err != nil {
			return fmt.Errorf("register builtin %s: %w", name, err)
		}
	}
	return nil
}

// RegisterTool implements ToolService.
func (s *Service) RegisterTool(ctx context.Context, req *toolsv1.RegisterToolRequest) (*toolsv1.RegisterToolResponse, error) {
	source := req.GetSource()
	if source == SourceBuiltin || source == sourceFile {
		return nil, errclass.Errorf(errclass.Invalid, "source %q is set by the server itself; register with source api or mcp:<server>", source)
	}
	// A name belongs to the source that registered it; only an operator replaces another's.
	tool, changed, err := s.reg.Register(ctx, req.GetSpec(), source, auth.IsOperator(ctx))
	if err != nil {
		return nil, fmt.Errorf("store the tool: %w", err)
	}
	if changed {
		s.log.InfoContext(ctx, "tool registered", "tool", tool.GetSpec().GetName(), "version", tool.GetVersion(), "source", tool.GetSource())
	}
	return &toolsv1.RegisterToolResponse{Tool: tool, Changed: changed}, nil
}

// UnregisterTool implements ToolService.
func (s *Service) UnregisterTool(ctx context.Context, req *toolsv1.UnregisterToolRequest) (*toolsv1.UnregisterToolResponse, error) {
	var v rpc.Violations
	v.Required("name", req.GetName())
	v.MaxLen("name", req.GetName(), maxIDBytes)
	if err := v.Err(); err != nil {
		return nil, err
	}
	if req.GetSource() == "" && !auth.IsOperator(ctx) {
		return nil, errclass.New(errclass.Denied, "only an operator removes a tool of any source; set source to remove your own", nil)
	}
	if err := s.reg.Delete(ctx, req.GetName(), req.GetSource()); err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, s.notFound(ctx, req.GetName())
		}
		return nil, fmt.Errorf("delete the tool: %w", err)
	}
	s.log.InfoContext(ctx, "tool unregistered", "tool", req.GetName())
	return &toolsv1.UnregisterToolResponse{}, nil
}

// GetTool implements ToolService.
func (s *Service) GetTool(ctx context.Context, req *toolsv1.GetToolRequest) (*toolsv1.GetToolResponse, error) {
	var v rpc.Violations
	v.Required("name", req.GetName())
	v.MaxLen("name", req.GetName(), maxIDBytes)
	if err := v.Err(); err != nil {
		return nil, err
	}
	st, err := s.reg.store.GetTool(ctx, req.GetName())
	if errors.Is(err, ErrNotFound) {
		return nil, s.notFound(ctx, req.GetName())
	}
	if err != nil {
		return nil, fmt.Errorf("read the tool: %w", err)
	}
	t := st.Tool
	if userView(ctx) {
		t = redactTool(t)
	}
	return &toolsv1.GetToolResponse{Tool: t}, nil
}

// notFound is NOT_FOUND naming the closest registered tools.
func (s *Service) notFound(ctx context.Context, name string) error {
	msg := fmt.Sprintf("no tool is named %q", truncateRunes(name, 80))
	if near := s.closest(ctx, name, 3); len(near) > 0 {
		msg += "; closest registered: " + strings.Join(near, ", ")
	}
	return errclass.New(errclass.NotFound, msg, nil)
}

// ListTools implements ToolService.
func (s *Service) ListTools(ctx context.Context, req *toolsv1.ListToolsRequest) (*toolsv1.ListToolsResponse, error) {
	var v rpc.Violations
	if n := req.GetPageSize(); n < 0 || n > maxPageSize {
		v.Add("page_size", "must be between 0 and %d", maxPageSize)
	}
	if len(req.GetGroups()) > maxListFilter {
		v.Add("groups", "at most %d groups", maxListFilter)
	}
	if len(req.GetNames()) > maxListFilter {
		v.Add("names", "at most %d names", maxListFilter)
	}
	after := ""
	if t := req.GetPageToken(); t != "" {
		b, err := base64.RawURLEncoding.DecodeString(t)
		if err != nil || len(b) == 0 || len(b) > 64 {
			v.Add("page_token", "is not a token from a previous ListTools response")
		}
		after = string(b)
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	size := int(req.GetPageSize())
	if size == 0 {
		size = defaultPageSize
	}
	list, _, err := s.reg.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the tools: %w", err)
	}
	groups, names := setOf(req.GetGroups()), setOf(req.GetNames())
	resp := &toolsv1.ListToolsResponse{}
	for _, st := range list {
		spec := st.Tool.GetSpec()
		if spec.GetName() <= after {
			continue
		}
		if len(names) > 0 && !names[spec.GetName()] {
			continue
		}
		if len(groups) > 0 && !slices.ContainsFunc(spec.GetGroups(), func(g string) bool { return groups[g] }) {
			continue
		}
		if len(resp.Tools) == size {
			resp.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(resp.Tools[size-1].GetSpec().GetName()))
			break
		}
		resp.Tools = append(resp.Tools, st.Tool)
	}
	redactTools(ctx, resp.Tools)
	return resp, nil
}

func setOf(xs []string) map[string]bool {
	m := make(map[string]bool, len(xs))
	for _, x := range xs {
		m[x] = true
	}
	return m
}

// ExecuteTool implements ToolService.
func (s *Service) ExecuteTool(ctx context.Context, req *toolsv1.ExecuteToolRequest) (*toolsv1.ExecuteToolResponse, error) {
	var v rpc.Violations
	v.Required("name", req.GetName())
	v.MaxLen("name", req.GetName(), maxIDBytes)
	v.MaxLen("call_id", req.GetCallId(), maxIDBytes)
	v.MaxLen("session_id", req.GetSessionId(), maxIDBytes)
	v.MaxLen("user_id", req.GetUserId(), maxIDBytes)
	v.MaxLen("idempotency_key", req.GetIdempotencyKey(), maxIDBytes)
	if req.GetMaxOutputBytes() < 0 {
		v.Add("max_output_bytes", "must not be negative")
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	res, err := s.execute(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("run the tool: %w", err)
	}
	// Checked first: the arguments would be boxed on every call even with debug logging off.
	if s.log.Enabled(ctx, slog.LevelDebug) {
		s.log.DebugContext(ctx, "tool executed", "tool", req.GetName(), "call_id", req.GetCallId(), "success", res.GetSuccess(),
			"error", res.GetError().GetCode().String(), "attempts", res.GetAttempts(), "replayed", res.GetReplayed())
	}
	return &toolsv1.ExecuteToolResponse{Result: res}, nil
}

// unknownTool is the result for a name that is not registered, listing the closest names.
func (s *Service) unknownTool(ctx context.Context, name string) (*toolsv1.ToolResult, error) {
	msg := fmt.Sprintf("No tool is named %q.", truncateRunes(name, 80))
	if near := s.closest(ctx, name, 3); len(near) > 0 {
		msg += " The closest registered tools are: " + strings.Join(near, ", ") + ". Call one of the tools you were given, with its exact name."
	} else {
		msg += " Call one of the tools you were given, with its exact name."
	}
	return failure(&toolsv1.ToolResult{}, toolsv1.ErrorCode_ERROR_CODE_UNKNOWN_TOOL, msg), nil
}

// closest returns up to n registered names nearest to name by edit distance (case-insensitive),
// preferring names that contain it or that it contains.
func (s *Service) closest(ctx context.Context, name string, n int) []string {
	list, _, err := s.reg.List(ctx)
	if err != nil {
		return nil
	}
	type cand struct {
		name string
		d    int
	}
	q := strings.ToLower(name)
	var cs []cand
	for _, st := range list {
		c := st.Tool.GetSpec().GetName()
		lc := strings.ToLower(c)
		d := levenshtein(q, lc)
		if q != "" && (strings.Contains(lc, q) || strings.Contains(q, lc)) {
			d = min(d, 1)
		}
		cs = append(cs, cand{c, d})
	}
	sort.Slice(cs, func(i, j int) bool {
		if cs[i].d != cs[j].d {
			return cs[i].d < cs[j].d
		}
		return cs[i].name < cs[j].name
	})
	var out []string
	for _, c := range cs[:min(n, len(cs))] {
		out = append(out, c.name)
	}
	return out
}

// levenshtein is the edit distance of two short strings (runes), bounded to 256 runes each.
func levenshtein(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	ra, rb = ra[:min(len(ra), 256)], rb[:min(len(rb), 256)]
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// SelectTools implements ToolService.
func (s *Service) SelectTools(ctx context.Context, req *toolsv1.SelectToolsRequest) (*toolsv1.SelectToolsResponse, error) {
	var v rpc.Violations
	v.MaxLen("text", req.GetText(), maxSelectText)
	if n := req.GetMaxTools(); n < 0 || n > maxSelectMaxTools {
		v.Add("max_tools", "must be between 0 and %d", maxSelectMaxTools)
	}
	if len(req.GetAlwaysInclude()) > maxAlwaysInclude {
		v.Add("always_include", "at most %d names", maxAlwaysInclude)
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	maxTools := int(req.GetMaxTools())
	if maxTools == 0 {
		maxTools = s.cfg.SelectMax
	}
	list, rev, err := s.reg.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the tools: %w", err)
	}
	resp := &toolsv1.SelectToolsResponse{TotalTools: int32(len(list))}
	byName := map[string]*toolsv1.Tool{}
	for _, st := range list {
		byName[st.Tool.GetSpec().GetName()] = st.Tool
		resp.TotalSchemaTokens += st.Tool.GetSchemaTokens()
	}
	added := map[string]bool{}
	redact := userView(ctx)
	add := func(t *toolsv1.Tool, reason string, score float64) {
		if added[t.GetSpec().GetName()] {
			return
		}
		added[t.GetSpec().GetName()] = true
		if redact {
			t = redactTool(t)
		}
		resp.Tools = append(resp.Tools, &toolsv1.SelectedTool{Tool: t, Reason: reason, Score: score})
		resp.SelectedSchemaTokens += t.GetSchemaTokens()
	}

	if len(list) <= s.cfg.SelectThreshold {
		resp.AllTools = true
		reason := fmt.Sprintf("all tools are sent while at most %d are registered", s.cfg.SelectThreshold)
		for _, st := range list {
			add(st.Tool, reason, 0)
		}
		return resp, nil
	}
	idx := s.sel.index(list, rev)
	sel := idx.choose(req.GetText(), maxTools)
	resp.Groups = sel.groups
	for _, p := range sel.picks {
		add(idx.tools[p.i].Tool, p.reason, p.score)
	}
	always := append(splitList(s.cfg.AlwaysInclude), req.GetAlwaysInclude()...)
	for _, name := range always {
		if t, ok := byName[name]; ok {
			add(t, "always included", 0)
		}
	}
	return resp, nil
}
