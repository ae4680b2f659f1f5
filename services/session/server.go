// Package session is the session service: conversations as append-only message logs, the
// context window built from them (last N complete turns, folded into the rolling summary K at a
// time, token budget, sticky messages, tool-call pair repair) and full-text search over a
// user's messages.
package session

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hermes-agent/hermes/internal/auth"
	"github.com/hermes-agent/hermes/internal/boltstore"
	"github.com/hermes-agent/hermes/internal/errclass"
	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/tokenizer"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// Limits on requests. Content sizes beyond them are RESOURCE_EXHAUSTED; malformed values are
// INVALID_ARGUMENT.
const (
	maxIDBytes           = 128
	maxTitleBytes        = 256
	maxMetadataEntries   = 16
	maxMetadataKeyBytes  = 64
	maxMetadataValBytes  = 1024
	maxContentBytes      = 1 << 20
	maxBatchBytes        = 4 << 20
	maxBatchMessages     = 100
	maxPageSize          = 1000
	maxWindowTurns       = 200
	maxFoldTurns         = 200
	maxTokenBudget       = 10_000_000
	maxEvictedLimit      = 1000
	maxSummaryBytes      = 64 << 10
	maxQueryBytes        = 1024
	maxSearchPage        = 100
	maxSearchNeighbors   = 5
	defaultSessionsPage  = 50
	defaultMessagesPage  = 100
	defaultSearchPage    = 20
	defaultSearchContext = 1
)

// Service implements sessionv1.SessionServiceServer.
type Service struct {
	sessionv1.UnimplementedSessionServiceServer
	store Store
	tok   *tokenizer.Tokenizer
	cfg   Config
	log   *slog.Logger

	mu sync.Mutex // guards idents
	// idents caches sessions' identities (id, owner, config), which never change: ids are ULIDs
	// this service makes and never reuses. AppendMessages and BuildContext check ownership
	// against it instead of reading the session first (a store round trip per call); their store
	// operations still fail on a session deleted meanwhile. Cleared at maxCachedIdents.
	idents map[string]*sessionv1.Session
}

const maxCachedIdents = 1 << 16

// Options are the session service's dependencies.
type Options struct {
	// Store keeps the sessions; required.
	Store Store
	// Tokenizer counts the messages' tokens; required.
	Tokenizer *tokenizer.Tokenizer
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// NewService returns the session service.
func NewService(cfg Config, o Options) (*Service, error) {
	if o.Store == nil || o.Tokenizer == nil {
		return nil, errors.New("session: a store and a tokenizer are required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if cfg.WindowTurns <= 0 {
		cfg.WindowTurns = 12
	}
	if cfg.MaxEvicted <= 0 {
		cfg.MaxEvicted = 200
	}
	switch {
	case cfg.FoldTurns <= 0:
		// A Config built in code folds every turn as it leaves, as before the setting existed.
		cfg.FoldTurns = 1
	case cfg.FoldTurns > maxFoldTurns:
		return nil, fmt.Errorf("session: fold-turns is %d; it must be between 1 and %d", cfg.FoldTurns, maxFoldTurns)
	}
	return &Service{store: o.Store, tok: o.Tokenizer, cfg: cfg, log: o.Logger, idents: map[string]*sessionv1.Session{}}, nil
}

// newID returns a ULID: time-sortable, with 80 bits from crypto/rand so ids cannot be guessed.
func newID(t time.Time) string {
	return ulid.MustNew(ulid.Timestamp(t), rand.Reader).String()
}

func validateIDs(v *rpc.Violations, sessionID, userID string) {
	v.Required("session_id", sessionID)
	v.MaxLen("session_id", sessionID, maxIDBytes)
	validateUser(v, userID)
}

func validateUser(v *rpc.Violations, userID string) {
	v.Required("user_id", userID)
	v.MaxLen("user_id", userID, maxIDBytes)
}

func validatePageSize(v *rpc.Violations, size int32) {
	if size < 0 || size > maxPageSize {
		v.Add("page_size", "must be between 0 and %d", maxPageSize)
	}
}

func validateMetadata(v *rpc.Violations, field string, md map[string]string) {
	if len(md) > maxMetadataEntries {
		v.Add(field, "has %d entries; at most %d are allowed", len(md), maxMetadataEntries)
	}
	for k, val := range md {
		if k == "" || len(k) > maxMetadataKeyBytes {
			v.Add(field, "key %.64q must be 1 to %d bytes", k, maxMetadataKeyBytes)
		}
		if len(val) > maxMetadataValBytes {
			v.Add(field+"["+k+"]", "is %d bytes; at most %d are allowed", len(val), maxMetadataValBytes)
		}
	}
}

// owned loads a session and checks that userID owns it.
func (s *Service) owned(ctx context.Context, sessionID, userID string) (*sessionv1.Session, error) {
	sess, err := s.store.GetSession(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	if sess.GetUserId() != userID {
		return nil, errclass.Errorf(errclass.Denied, "session %q belongs to another user", sessionID)
	}
	return sess, nil
}

// ownedIdent is owned for callers that need only the session's identity and config (not its
// state, which it does not carry) and whose store operation fails for a deleted session.
func (s *Service) ownedIdent(ctx context.Context, sessionID, userID string) (*sessionv1.Session, error) {
	s.mu.Lock()
	id, ok := s.idents[sessionID]
	s.mu.Unlock()
	if !ok {
		sess, err := s.owned(ctx, sessionID, userID)
		if err != nil {
			return nil, err
		}
		id = &sessionv1.Session{Id: sess.GetId(), UserId: sess.GetUserId(), Config: sess.GetConfig()}
		s.mu.Lock()
		if len(s.idents) >= maxCachedIdents {
			clear(s.idents)
		}
		s.idents[sessionID] = id
		s.mu.Unlock()
	}
	if id.GetUserId() != userID {
		return nil, errclass.Errorf(errclass.Denied, "session %q belongs to another user", sessionID)
	}
	return id, nil
}

// CreateSession implements SessionServiceServer.
func (s *Service) CreateSession(ctx context.Context, req *sessionv1.CreateSessionRequest) (*sessionv1.CreateSessionResponse, error) {
	var v rpc.Violations
	validateUser(&v, req.GetUserId())
	v.MaxLen("title", req.GetTitle(), maxTitleBytes)
	validateMetadata(&v, "metadata", req.GetMetadata())
	if w := req.GetConfig().GetWindowTurns(); w < 0 || w > maxWindowTurns {
		v.Add("config.window_turns", "must be between 0 and %d", maxWindowTurns)
	}
	if b := req.GetConfig().GetTokenBudget(); b < 0 || b > maxTokenBudget {
		v.Add("config.token_budget", "must be between 0 and %d", maxTokenBudget)
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	now := time.Now()
	sess := &sessionv1.Session{
		Id:        newID(now),
		UserId:    req.GetUserId(),
		Title:     req.GetTitle(),
		Metadata:  req.GetMetadata(),
		CreatedAt: timestamppb.New(now),
		Config: &sessionv1.SessionConfig{
			WindowTurns: orDefault(req.GetConfig().GetWindowTurns(), int32(s.cfg.WindowTurns)),
			TokenBudget: orDefault(req.GetConfig().GetTokenBudget(), int32(s.cfg.TokenBudget)),
		},
		State: &sessionv1.SessionState{UpdatedAt: timestamppb.New(now)},
	}
	if err := s.store.CreateSession(ctx, sess); err != nil {
		return nil, err
	}
	return &sessionv1.CreateSessionResponse{Session: sess}, nil
}

func orDefault(v, def int32) int32 {
	if v == 0 {
		return def
	}
	return v
}

// GetSession implements SessionServiceServer.
func (s *Service) GetSession(ctx context.Context, req *sessionv1.GetSessionRequest) (*sessionv1.GetSessionResponse, error) {
	var v rpc.Violations
	validateIDs(&v, req.GetSessionId(), req.GetUserId())
	if err := v.Err(); err != nil {
		return nil, err
	}
	sess, err := s.owned(ctx, req.GetSessionId(), req.GetUserId())
	if err != nil {
		return nil, err
	}
	return &sessionv1.GetSessionResponse{Session: sess}, nil
}

// ListSessions implements SessionServiceServer.
func (s *Service) ListSessions(ctx context.Context, req *sessionv1.ListSessionsRequest) (*sessionv1.ListSessionsResponse, error) {
	var v rpc.Violations
	validateUser(&v, req.GetUserId())
	validatePageSize(&v, req.GetPageSize())
	if err := v.Err(); err != nil {
		return nil, err
	}
	limit := int(orDefault(req.GetPageSize(), defaultSessionsPage))
	list, next, err := s.store.ListSessions(ctx, req.GetUserId(), req.GetPageToken(), limit)
	if err != nil {
		return nil, err
	}
	return &sessionv1.ListSessionsResponse{Sessions: list, NextPageToken: next}, nil
}

// DeleteSession implements SessionServiceServer.
func (s *Service) DeleteSession(ctx context.Context, req *sessionv1.DeleteSessionRequest) (*sessionv1.DeleteSessionResponse, error) {
	var v rpc.Violations
	validateIDs(&v, req.GetSessionId(), req.GetUserId())
	if err := v.Err(); err != nil {
		return nil, err
	}
	if _, err := s.owned(ctx, req.GetSessionId(), req.GetUserId()); err != nil {
		return nil, err
	}
	n, err := s.store.DeleteSession(ctx, req.GetUserId(), req.GetSessionId())
	s.mu.Lock()
	delete(s.idents, req.GetSessionId())
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return &sessionv1.DeleteSessionResponse{DeletedMessages: n}, nil
}

// validateNewMessage checks one message of an append; sizes are checked separately.
func validateNewMessage(v *rpc.Violations, i int, m *sessionv1.NewMessage) {
	f := func(name string) string { return fmt.Sprintf("messages[%d].%s", i, name) }
	kind := m.GetKind()
	if kind == sessionv1.MessageKind_MESSAGE_KIND_UNSPECIFIED {
		kind = sessionv1.MessageKind_MESSAGE_KIND_TEXT
	}
	if _, ok := sessionv1.Role_name[int32(m.GetRole())]; !ok || m.GetRole() == sessionv1.Role_ROLE_UNSPECIFIED {
		v.Add(f("role"), "is required: ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL or ROLE_SYSTEM")
	}
	switch kind {
	case sessionv1.MessageKind_MESSAGE_KIND_TEXT:
		if m.GetRole() == sessionv1.Role_ROLE_TOOL {
			v.Add(f("kind"), "a ROLE_TOOL message must be MESSAGE_KIND_TOOL_RESULT")
		}
	case sessionv1.MessageKind_MESSAGE_KIND_TOOL_CALL:
		if m.GetRole() != sessionv1.Role_ROLE_ASSISTANT {
			v.Add(f("role"), "a tool_call comes from ROLE_ASSISTANT")
		}
		v.Required(f("tool_call_id"), m.GetToolCallId())
		v.Required(f("tool_name"), m.GetToolName())
	case sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT:
		if m.GetRole() != sessionv1.Role_ROLE_TOOL {
			v.Add(f("role"), "a tool_result comes from ROLE_TOOL")
		}
		v.Required(f("tool_call_id"), m.GetToolCallId())
	case sessionv1.MessageKind_MESSAGE_KIND_SUMMARY:
		v.Add(f("kind"), "the summary is set with UpdateSummary, not appended")
	default:
		v.Add(f("kind"), "unknown kind %d", kind)
	}
	if m.GetSticky() && kind != sessionv1.MessageKind_MESSAGE_KIND_TEXT {
		v.Add(f("sticky"), "only text messages can be sticky (a tool call and its result must stay paired)")
	}
	v.MaxLen(f("tool_call_id"), m.GetToolCallId(), maxIDBytes)
	v.MaxLen(f("tool_name"), m.GetToolName(), maxIDBytes)
	v.MaxLen(f("client_id"), m.GetClientId(), maxIDBytes)
	validateMetadata(v, f("metadata"), m.GetMetadata())
}

// durability lets only Hermes' own services (the monolith's orchestrator) and operators defer a
// write to the file's next commit (boltstore.DeferHeader): a user's acknowledged write is on disk.
func durability(ctx context.Context) context.Context {
	if auth.IsPrivileged(ctx) {
		return ctx
	}
	return boltstore.DropDefer(ctx)
}

// InProcessHandover names the methods whose responses an in-process caller may take without a
// copy (internal/rpc): AppendMessages builds its response from messages the store decoded or
// built for this call (a deferred write re-applies its own copies). The context's messages may
// be the bolt store's decoded ones, shared with later loads (decodedCache): the caller only
// reads them, as the orchestrator does.
func (s *Service) InProcessHandover() []string { return []string{"AppendMessages"} }

// AppendMessages implements SessionServiceServer.
func (s *Service) AppendMessages(ctx context.Context, req *sessionv1.AppendMessagesRequest) (*sessionv1.AppendMessagesResponse, error) {
	ctx = durability(ctx)
	var v rpc.Violations
	validateIDs(&v, req.GetSessionId(), req.GetUserId())
	msgs := req.GetMessages()
	switch {
	case len(msgs) == 0:
		v.Add("messages", "at least one message is required")
	case len(msgs) > maxBatchMessages:
		return nil, errclass.Errorf(errclass.Exhausted, "messages: %d in one batch; at most %d are allowed", len(msgs), maxBatchMessages)
	}
	if req.ExpectedLastSeq != nil && req.GetExpectedLastSeq() < 0 {
		v.Add("expected_last_seq", "must not be negative")
	}
	clientIDs := map[string]int{}
	total := 0
	for i, m := range msgs {
		validateNewMessage(&v, i, m)
		if cid := m.GetClientId(); cid != "" {
			if j, dup := clientIDs[cid]; dup {
				v.Add(fmt.Sprintf("messages[%d].client_id", i), "repeats messages[%d].client_id", j)
			}
			clientIDs[cid] = i
		}
		if n := len(m.GetContent()); n > maxContentBytes {
			return nil, errclass.Errorf(errclass.Exhausted, "messages[%d].content: %d bytes; at most %d are allowed", i, n, maxContentBytes)
		}
		total += len(m.GetContent())
	}
	if total > maxBatchBytes {
		return nil, errclass.Errorf(errclass.Exhausted, "messages: %d bytes of content in one batch; at most %d are allowed", total, maxBatchBytes)
	}
	if bc := req.GetBuildContext(); bc != nil {
		if id := bc.GetSessionId(); id != "" && id != req.GetSessionId() {
			v.Add("build_context.session_id", "must be empty or the request's session_id")
		}
		if id := bc.GetUserId(); id != "" && id != req.GetUserId() {
			v.Add("build_context.user_id", "must be empty or the request's user_id")
		}
		validateBuildOptions(&v, "build_context.", bc)
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	sess, err := s.ownedIdent(ctx, req.GetSessionId(), req.GetUserId())
	if err != nil {
		return nil, err
	}
	now := time.Now()
	items := make([]AppendItem, len(msgs))
	for i, nm := range msgs {
		kind := nm.GetKind()
		if kind == sessionv1.MessageKind_MESSAGE_KIND_UNSPECIFIED {
			kind = sessionv1.MessageKind_MESSAGE_KIND_TEXT
		}
		m := &sessionv1.Message{
			Id:         newID(now),
			Role:       nm.GetRole(),
			Kind:       kind,
			Content:    nm.GetContent(),
			ToolCallId: nm.GetToolCallId(),
			ToolName:   nm.GetToolName(),
			Sticky:     nm.GetSticky(),
			CreatedAt:  timestamppb.New(now),
			TokenCount: s.countMessage(nm.GetToolName(), nm.GetContent()),
			ClientId:   nm.GetClientId(),
			Metadata:   nm.GetMetadata(),
		}
		items[i] = AppendItem{Message: m}
		if kind == sessionv1.MessageKind_MESSAGE_KIND_TEXT {
			items[i].Terms = textTerms(m.GetContent())
		}
	}
	bc := req.GetBuildContext()
	if bc == nil {
		res, err := s.store.Append(ctx, req.GetUserId(), req.GetSessionId(), items, req.ExpectedLastSeq)
		if err != nil {
			return nil, err
		}
		return &sessionv1.AppendMessagesResponse{Messages: res.Messages, State: res.State, Deduplicated: int32(res.Deduplicated)}, nil
	}
	// The context is loaded with the append. A failure there fails the call though the messages
	// are stored (see the proto).
	cp := s.contextParams(sess, bc)
	res, d, err := s.store.AppendLoad(ctx, req.GetUserId(), req.GetSessionId(), items, req.ExpectedLastSeq, cp.load, cp.maxEvicted)
	if err != nil {
		return nil, err
	}
	return &sessionv1.AppendMessagesResponse{
		Messages: res.Messages, State: res.State, Deduplicated: int32(res.Deduplicated),
		Context: s.assembleContext(d, cp, bc),
	}, nil
}

// countMessage counts a message's tokens as a chat request carries it: content, the tool's name
// for tool messages, and the per-message overhead.
func (s *Service) countMessage(toolName, content string) int32 {
	return int32(s.tok.CountStored(toolName, content))
}

// ListMessages implements SessionServiceServer.
func (s *Service) ListMessages(ctx context.Context, req *sessionv1.ListMessagesRequest) (*sessionv1.ListMessagesResponse, error) {
	var v rpc.Violations
	validateIDs(&v, req.GetSessionId(), req.GetUserId())
	validatePageSize(&v, req.GetPageSize())
	if req.GetAfterSeq() < 0 {
		v.Add("after_seq", "must not be negative")
	}
	after := req.GetAfterSeq()
	if tok := req.GetPageToken(); tok != "" {
		var n int64
		if _, err := fmt.Sscanf(tok, "seq:%d", &n); err != nil || n < 0 {
			v.Add("page_token", "is not valid: pass the next_page_token of a previous call")
		}
		after = n
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	sess, err := s.owned(ctx, req.GetSessionId(), req.GetUserId())
	if err != nil {
		return nil, err
	}
	limit := int(orDefault(req.GetPageSize(), defaultMessagesPage))
	msgs, err := s.store.ListMessages(ctx, req.GetSessionId(), after, limit)
	if err != nil {
		return nil, err
	}
	msgs, cut := pageBySize(msgs)
	resp := &sessionv1.ListMessagesResponse{Messages: msgs}
	if (cut || len(msgs) == limit) && msgs[len(msgs)-1].GetSeq() < sess.GetState().GetLastSeq() {
		resp.NextPageToken = fmt.Sprintf("seq:%d", msgs[len(msgs)-1].GetSeq())
	}
	return resp, nil
}

// BuildContext implements SessionServiceServer.
func (s *Service) BuildContext(ctx context.Context, req *sessionv1.BuildContextRequest) (*sessionv1.BuildContextResponse, error) {
	var v rpc.Violations
	validateIDs(&v, req.GetSessionId(), req.GetUserId())
	validateBuildOptions(&v, "", req)
	if err := v.Err(); err != nil {
		return nil, err
	}
	sess, err := s.ownedIdent(ctx, req.GetSessionId(), req.GetUserId())
	if err != nil {
		return nil, err
	}
	return s.buildContext(ctx, sess, req)
}

// validateBuildOptions checks BuildContext's options; prefix names the field that holds them
// ("build_context." in AppendMessages).
func validateBuildOptions(v *rpc.Violations, prefix string, req *sessionv1.BuildContextRequest) {
	if w := req.GetWindowTurns(); w < 0 || w > maxWindowTurns {
		v.Add(prefix+"window_turns", "must be between 0 and %d", maxWindowTurns)
	}
	if b := req.GetTokenBudget(); b < 0 || b > maxTokenBudget {
		v.Add(prefix+"token_budget", "must be between 0 and %d", maxTokenBudget)
	}
	if e := req.GetMaxEvicted(); e < 0 || e > maxEvictedLimit {
		v.Add(prefix+"max_evicted", "must be between 0 and %d", maxEvictedLimit)
	}
	if n := req.GetMaxMessageBytes(); n < 0 || n > maxMessageBytesLimit {
		v.Add(prefix+"max_message_bytes", "must be between 0 and %d", maxMessageBytesLimit)
	}
}

// contextParams are the figures a context is built with: the request's options, else the
// session's configuration, else the service's.
type contextParams struct {
	turns, budget, maxEvicted int
	// load is how many turns the store reads: FoldTurns-1 more than the window, which stay in
	// it until FoldTurns of them can be folded into the summary at once (see assemble).
	load int
}

func (s *Service) contextParams(sess *sessionv1.Session, req *sessionv1.BuildContextRequest) contextParams {
	turns := int(orDefault(req.GetWindowTurns(), orDefault(sess.GetConfig().GetWindowTurns(), int32(s.cfg.WindowTurns))))
	return contextParams{
		turns:      turns,
		budget:     int(orDefault(req.GetTokenBudget(), orDefault(sess.GetConfig().GetTokenBudget(), int32(s.cfg.TokenBudget)))),
		maxEvicted: int(orDefault(req.GetMaxEvicted(), int32(s.cfg.MaxEvicted))),
		load:       turns + s.cfg.FoldTurns - 1,
	}
}

// buildContext builds the context of sess, whose owner was checked, with req's options.
func (s *Service) buildContext(ctx context.Context, sess *sessionv1.Session, req *sessionv1.BuildContextRequest) (*sessionv1.BuildContextResponse, error) {
	cp := s.contextParams(sess, req)
	d, err := s.store.LoadContext(ctx, sess.GetId(), cp.load, cp.maxEvicted)
	if err != nil {
		return nil, err
	}
	return s.assembleContext(d, cp, req), nil
}

// assembleContext builds the response from what the store loaded.
func (s *Service) assembleContext(d *ContextData, cp contextParams, req *sessionv1.BuildContextRequest) *sessionv1.BuildContextResponse {
	a := assemble(d, cp.turns, cp.budget, cp.maxEvicted, func(c string) int32 { return int32(s.tok.CountMessage(c)) })
	s.bound(a, int(orDefault(req.GetMaxMessageBytes(), defaultMessageBytes)))
	resp := &sessionv1.BuildContextResponse{
		Pinned:                a.pinned,
		Window:                a.window,
		Evicted:               a.evicted,
		EvictedTruncated:      a.evictedMore,
		Repairs:               a.repairs,
		WindowTurns:           int32(a.windowTurns),
		TurnsDroppedForBudget: int32(a.droppedForBudget),
		WindowStartSeq:        a.windowStartSeq,
		LastSeq:               d.Session.GetState().GetLastSeq(),
		Tokens:                &sessionv1.ContextTokens{Encoding: s.tok.Name()},
	}
	if d.Summary != nil {
		resp.Summary = summaryMessage(d.Summary)
		resp.Tokens.Summary = d.Summary.TokenCount
	}
	resp.Tokens.Pinned = sumTokens(a.pinned)
	resp.Tokens.Window = sumTokens(a.window)
	resp.Tokens.Evicted = sumTokens(a.evicted)
	resp.Tokens.Total = resp.Tokens.Summary + resp.Tokens.Pinned + resp.Tokens.Window
	return resp
}

// bound keeps a built context within its byte bounds: each message's content within
// maxMessage, the evicted messages within maxEvictedBytes (the rest follows in a later call),
// and the window and pinned messages together within maxWindowBytes.
func (s *Service) bound(a *assembled, maxMessage int) {
	var more bool
	if a.evicted, more = boundEvicted(a.evicted); more {
		a.evictedMore = true
	}
	if n := len(a.window) + len(a.pinned); n > 0 && contentBytes(a.window, a.pinned) > maxWindowBytes {
		maxMessage = min(maxMessage, max(maxWindowBytes/n, minMessageBytes))
	}
	for _, msgs := range []*[]*sessionv1.Message{&a.window, &a.pinned, &a.evicted} {
		*msgs, _ = clipMessages(*msgs, maxMessage, s.countMessage)
	}
}

func sumTokens(msgs []*sessionv1.Message) int32 {
	var n int32
	for _, m := range msgs {
		n += m.GetTokenCount()
	}
	return n
}

// UpdateSummary implements SessionServiceServer.
func (s *Service) UpdateSummary(ctx context.Context, req *sessionv1.UpdateSummaryRequest) (*sessionv1.UpdateSummaryResponse, error) {
	ctx = durability(ctx)
	var v rpc.Violations
	validateIDs(&v, req.GetSessionId(), req.GetUserId())
	v.Required("content", req.GetContent())
	if req.GetThroughSeq() < 1 {
		v.Add("through_seq", "must be at least 1: the last seq the summary covers")
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	if n := len(req.GetContent()); n > maxSummaryBytes {
		return nil, errclass.Errorf(errclass.Exhausted, "content: %d bytes; a summary may have at most %d", n, maxSummaryBytes)
	}
	if _, err := s.owned(ctx, req.GetSessionId(), req.GetUserId()); err != nil {
		return nil, err
	}
	sum := &Summary{
		Content:            req.GetContent(),
		ThroughSeq:         req.GetThroughSeq(),
		TokenCount:         int32(s.tok.CountMessage(req.GetContent())),
		UpdatedAtUnixMilli: time.Now().UnixMilli(),
	}
	prev, err := s.store.UpdateSummary(ctx, req.GetSessionId(), sum)
	if err != nil {
		return nil, err
	}
	return &sessionv1.UpdateSummaryResponse{Summary: summaryMessage(sum), PreviousThroughSeq: prev}, nil
}

// SearchMessages implements SessionServiceServer.
func (s *Service) SearchMessages(ctx context.Context, req *sessionv1.SearchMessagesRequest) (*sessionv1.SearchMessagesResponse, error) {
	var v rpc.Violations
	validateUser(&v, req.GetUserId())
	v.Required("query", req.GetQuery())
	v.MaxLen("query", req.GetQuery(), maxQueryBytes)
	v.MaxLen("session_id", req.GetSessionId(), maxIDBytes)
	if n := req.GetNeighbors(); n < 0 || n > maxSearchNeighbors {
		v.Add("neighbors", "must be between 0 and %d", maxSearchNeighbors)
	}
	if n := req.GetPageSize(); n < 0 || n > maxSearchPage {
		v.Add("page_size", "must be between 0 and %d", maxSearchPage)
	}
	terms := queryTerms(req.GetQuery())
	if req.GetQuery() != "" && len(terms) == 0 {
		v.Add("query", "has no words to search for")
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	if sid := req.GetSessionId(); sid != "" {
		if _, err := s.owned(ctx, sid, req.GetUserId()); err != nil {
			return nil, err
		}
	}
	neighbors := int(orDefault(req.GetNeighbors(), defaultSearchContext))
	limit := int(orDefault(req.GetPageSize(), defaultSearchPage))
	res, err := s.store.Search(ctx, req.GetUserId(), terms, req.GetSessionId(), neighbors, limit)
	if err != nil {
		return nil, err
	}
	out := &sessionv1.SearchMessagesResponse{}
	for _, r := range res {
		out.Hits = append(out.Hits, &sessionv1.SearchHit{
			SessionId: r.SessionID,
			Message:   r.Message,
			Before:    r.Before,
			After:     r.After,
			Score:     float64(r.Matched) / float64(len(terms)),
		})
	}
	return out, nil
}
