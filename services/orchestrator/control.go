package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/hermes-agent/hermes/internal/errclass"
	"github.com/hermes-agent/hermes/internal/rpc"
	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// Limits of the turn-control RPCs.
const (
	defaultTurnsPage = 20
	maxTurnsPage     = 100
	maxPageToken     = 512
	maxReasonBytes   = 1024
	// maxElicitationID and maxElicitationContent are the MCP gateway's limits of an answer,
	// checked here too so that a bad answer is refused before it crosses to the gateway.
	maxElicitationID      = 64
	maxElicitationContent = 64 << 10
	// cancelWait bounds how long CancelTurn waits for the turn to end before it answers with the
	// record as it stands.
	cancelWait = 10 * time.Second
	// cancelCheck is how often a running turn re-reads its cancellation flag besides the
	// wake-ups (a wake-up can be lost while a connection to Redis is re-established).
	cancelCheck = 10 * time.Second
)

// cancelledBy is the cause of a turn's end through CancelTurn.
type cancelledBy struct {
	by, reason string
}

func (c *cancelledBy) Error() string {
	if c.reason == "" {
		return "cancelled by " + c.by
	}
	return fmt.Sprintf("cancelled by %s: %s", c.by, c.reason)
}

// watchCancel returns the turn's context, which ends with a *cancelledBy cause once CancelTurn
// asks for it on any replica (a wake-up through the lease store, and a re-read every
// cancelCheck), and a function that stops watching.
func (s *Service) watchCancel(ctx context.Context, turnID string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		leases := s.deps.Store.Leases()
		t := time.NewTicker(cancelCheck)
		defer t.Stop()
		for {
			ch, unwatch := leases.Watch(cancelKey(turnID))
			select {
			case <-stop:
				unwatch()
				return
			case <-ctx.Done():
				unwatch()
				return
			case <-ch:
			case <-t.C:
			}
			unwatch()
			by, reason, ok, err := s.deps.Store.CancelRequest(ctx, turnID)
			if err != nil {
				s.log.Warn("cancellation flag not read", "turn", turnID, "error", err)
				continue
			}
			if ok {
				cancel(&cancelledBy{by: by, reason: reason})
				return
			}
		}
	}()
	return ctx, func() {
		close(stop)
		<-stopped
		cancel(nil)
	}
}

// withoutEvents is a turn record for lists: the events are left out.
func withoutEvents(t *orchestratorv1.Turn) *orchestratorv1.Turn {
	t = proto.CloneOf(t)
	t.Events = nil
	return t
}

// ListTurns implements OrchestratorServiceServer.
func (s *Service) ListTurns(ctx context.Context, req *orchestratorv1.ListTurnsRequest) (*orchestratorv1.ListTurnsResponse, error) {
	user, err := s.authorize(ctx, req.GetUserId())
	if err != nil {
		return nil, err
	}
	var v rpc.Violations
	validateRef(&v, "session_id", req.GetSessionId(), user)
	if n := req.GetPageSize(); n < 0 || n > maxTurnsPage {
		v.Add("page_size", "must be between 0 and %d", maxTurnsPage)
	}
	v.MaxLen("page_token", req.GetPageToken(), maxPageToken)
	if err := v.Err(); err != nil {
		return nil, err
	}
	// The session service says whether the session exists and is this user's.
	if _, err := s.deps.Session.GetSession(ctx, &sessionv1.GetSessionRequest{SessionId: req.GetSessionId(), UserId: user}); err != nil {
		return nil, peerStatus("session", err)
	}
	limit := int(req.GetPageSize())
	if limit == 0 {
		limit = defaultTurnsPage
	}
	turns, next, err := s.deps.Store.ListTurns(ctx, req.GetSessionId(), req.GetPageToken(), limit)
	if err != nil {
		return nil, fmt.Errorf("listing turns: %w", err)
	}
	resp := &orchestratorv1.ListTurnsResponse{NextPageToken: next}
	for _, t := range turns {
		if t.GetUserId() == user {
			resp.Turns = append(resp.Turns, withoutEvents(t))
		}
	}
	return resp, nil
}

// CancelTurn implements OrchestratorServiceServer. The turn may run on any replica: the request
// is recorded in the store and wakes the turn there; the turn then ends the way a client that
// went away ends it (a step in progress is stored with "cancelled" results for its tool calls,
// so every call keeps its result) and records who cancelled it. CancelTurn waits up to
// cancelWait for that and returns the record; a turn that had already finished is returned as
// it is.
func (s *Service) CancelTurn(ctx context.Context, req *orchestratorv1.CancelTurnRequest) (*orchestratorv1.CancelTurnResponse, error) {
	user, err := s.authorize(ctx, req.GetUserId())
	if err != nil {
		return nil, err
	}
	var v rpc.Violations
	validateRef(&v, "turn_id", req.GetTurnId(), user)
	v.MaxLen("reason", req.GetReason(), maxReasonBytes)
	if err := v.Err(); err != nil {
		return nil, err
	}
	t, err := s.ownTurn(ctx, req.GetTurnId(), user)
	if err != nil {
		return nil, err
	}
	if t.GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_RUNNING {
		return &orchestratorv1.CancelTurnResponse{Turn: withoutEvents(t)}, nil
	}
	if err := s.deps.Store.RequestCancel(ctx, t.GetId(), callerName(ctx, user), req.GetReason(), maxTurnTimeout); err != nil {
		return nil, fmt.Errorf("requesting the cancel: %w", err)
	}
	// The turn releases its session's lease when it has stored its end: wait for that.
	wctx, cancel := context.WithTimeout(ctx, cancelWait)
	defer cancel()
	leases := s.deps.Store.Leases()
	for {
		ch, unwatch := leases.Watch(sessionKey(t.GetSessionId()))
		cur, err := s.loadTurn(wctx, t.GetId())
		if err == nil {
			t = cur
		}
		if err != nil || t.GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_RUNNING {
			unwatch()
			break
		}
		select {
		case <-ch:
		case <-wctx.Done():
		case <-time.After(time.Second):
		}
		unwatch()
		if wctx.Err() != nil {
			break
		}
	}
	return &orchestratorv1.CancelTurnResponse{Turn: withoutEvents(t)}, nil
}

// ownTurn loads a turn record that belongs to user (loadTurn: an orphaned turn is ended first).
func (s *Service) ownTurn(ctx context.Context, turnID, user string) (*orchestratorv1.Turn, error) {
	t, err := s.loadTurn(ctx, turnID)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, errclass.Errorf(errclass.NotFound, "turn %q not found (records are kept for %s)", turnID, s.cfg.TurnRetention)
	case err != nil:
		return nil, fmt.Errorf("loading the turn: %w", err)
	}
	if t.GetUserId() != user {
		return nil, errclass.Errorf(errclass.Denied, "turn %q belongs to another user", turnID)
	}
	return t, nil
}

// AnswerElicitation implements OrchestratorServiceServer: the owner of a running turn answers a
// tool's request for input (ToolProgress.elicitation), which the MCP gateway delivers to the
// server that asked. The elicitation id is the capability: it reached only the turn's stream.
func (s *Service) AnswerElicitation(ctx context.Context, req *orchestratorv1.AnswerElicitationRequest) (*orchestratorv1.AnswerElicitationResponse, error) {
	user, err := s.authorize(ctx, req.GetUserId())
	if err != nil {
		return nil, err
	}
	var v rpc.Violations
	validateRef(&v, "turn_id", req.GetTurnId(), user)
	v.Required("elicitation_id", req.GetElicitationId())
	v.MaxLen("elicitation_id", req.GetElicitationId(), maxElicitationID)
	switch req.GetAction() {
	case "accept", "decline", "cancel":
	default:
		v.Add("action", `must be "accept", "decline" or "cancel"`)
	}
	v.MaxLen("content", req.GetContent(), maxElicitationContent)
	if err := v.Err(); err != nil {
		return nil, err
	}
	t, err := s.ownTurn(ctx, req.GetTurnId(), user)
	if err != nil {
		return nil, err
	}
	if t.GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_RUNNING {
		return nil, errclass.Errorf(errclass.Precondition, "turn %q is not running", req.GetTurnId())
	}
	if s.deps.Gateway == nil {
		return nil, errclass.New(errclass.Precondition, "this orchestrator has no MCP gateway to deliver the answer to", nil)
	}
	_, err = s.deps.Gateway.AnswerElicitation(ctx, &mcpgatewayv1.AnswerElicitationRequest{Id: req.GetElicitationId(), Action: req.GetAction(), Content: req.GetContent()})
	if err != nil {
		return nil, peerStatus("mcpgateway", err)
	}
	return &orchestratorv1.AnswerElicitationResponse{}, nil
}
