package orchestrator

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hermes-agent/hermes/internal/backoff"
	"github.com/hermes-agent/hermes/internal/rpc"
	eventsv1 "github.com/hermes-agent/hermes/proto/hermes/events/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

// A turn whose orchestrator died (kill -9, a lost node) leaves its record RUNNING; its session
// lease, renewed every sessionLease/3 while it runs, then expires. Every replica looks for such
// turns (a sweep every orphanSweep, jittered so replicas do not look together; at start, which
// in the monolith finds the turns the previous process left; and on demand when GetTurn,
// CancelTurn or a waiting RunTurn meet one) and ends them as INTERRUPTED. The store makes that a
// compare-and-set, so one replica ends each.
const (
	orphanSweep = sessionLease / 3
	orphanBatch = 100
)

// interruptedMessage says why an interrupted turn ended, in its record's final event.
const interruptedMessage = "the orchestrator running this turn stopped before the turn ended (its session lease expired); what the turn stored is kept"

// sweepOrphans ends orphaned turns until Close.
func (s *Service) sweepOrphans() {
	defer close(s.swept)
	every := backoff.Policy{Initial: orphanSweep, Max: orphanSweep, Jitter: 0.5}
	for {
		s.reapRound(s.drainCtx)
		if !backoff.Sleep(s.drainCtx, every.Delay(0)) {
			return
		}
	}
}

// reapRound ends the orphaned turns the store names, a batch at a time.
func (s *Service) reapRound(ctx context.Context) {
	for ctx.Err() == nil {
		ids, err := s.deps.Store.OrphanedTurns(ctx, orphanBatch)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("orphaned turns not looked for", "error", err)
			}
			return
		}
		ended := 0
		for _, id := range ids {
			if ok, err := s.reapTurn(ctx, id); err != nil && !errors.Is(err, ErrNotFound) {
				if ctx.Err() == nil {
					s.log.Warn("orphaned turn not ended; the next sweep tries again", "turn", id, "error", err)
				}
				return
			} else if ok {
				ended++
			}
		}
		if ended == 0 || len(ids) < orphanBatch {
			return
		}
	}
}

// reapTurn ends turnID as INTERRUPTED if it is orphaned, publishing its turn.finished, and
// reports whether it did.
func (s *Service) reapTurn(ctx context.Context, turnID string) (bool, error) {
	var f *Finish
	ok, err := s.deps.Store.InterruptTurn(ctx, turnID, func(rec *orchestratorv1.Turn) *Finish {
		f = s.interrupted(rec)
		return f
	})
	if err != nil || !ok {
		return false, err
	}
	rec := f.Turn
	s.log.Warn("turn interrupted: the orchestrator running it stopped before it ended",
		"turn", rec.GetId(), "session", rec.GetSessionId(), "user", rec.GetUserId(), "started", rec.GetStartedAt().AsTime())
	s.met.turnFinished(ctx, rec.GetStatus(), rec.GetFinishedAt().AsTime().Sub(rec.GetStartedAt().AsTime()), rec.GetUsage())
	if f.Event != nil {
		s.publishNow(ctx, f.Event, f.publishedData())
	}
	return true, nil
}

// reapLater looks at turnID in the background (bounded by storeTimeout): for the holder of a
// session lease that a new turn had to wait for, which may have died.
func (s *Service) reapLater(turnID string) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		ctx, cancel := context.WithTimeout(s.bgCtx, storeTimeout)
		defer cancel()
		if _, err := s.reapTurn(ctx, turnID); err != nil && !errors.Is(err, ErrNotFound) && ctx.Err() == nil {
			s.log.Warn("turn of a lapsed session lease not checked", "turn", turnID, "error", err)
		}
	}()
}

// interrupted is what ending rec as INTERRUPTED stores: the record as last written with a
// TurnFailed event, the request left pending in the session's task state, and a turn.finished
// event that says INTERRUPTED (the memory extractor skips it).
func (s *Service) interrupted(rec *orchestratorv1.Turn) *Finish {
	rec = proto.CloneOf(rec)
	now := s.now()
	rec.Status = orchestratorv1.TurnStatus_TURN_STATUS_INTERRUPTED
	rec.FinishedAt = timestamppb.New(now)
	var seq int32
	if n := len(rec.GetEvents()); n > 0 {
		seq = rec.GetEvents()[n-1].GetSeq()
	}
	rec.Events = append(rec.Events, &orchestratorv1.TurnEvent{Seq: seq + 1, Time: timestamppb.New(now), Event: &orchestratorv1.TurnEvent_Failed{Failed: &orchestratorv1.TurnFailed{
		TurnId: rec.GetId(), Code: rpc.CodeName(codes.Aborted), Message: interruptedMessage, Usage: rec.GetUsage(), Steps: int32(countSteps(rec)),
	}}})
	f := &Finish{
		Turn: rec, TTL: s.cfg.TurnRetention, MaxPending: maxPending,
		SetPending: true, KeepPending: true,
		Pending: []Pending{{What: "unfinished request: " + clip(rec.GetText(), 200), TurnID: rec.GetId(), At: now.UTC()}},
	}
	if s.deps.Publish != nil {
		f.Event = &eventsv1.TurnFinished{
			TurnId: rec.GetId(), SessionId: rec.GetSessionId(), UserId: rec.GetUserId(),
			FinishedAt: rec.GetFinishedAt(), Status: rec.GetStatus(),
		}
	}
	return f
}

// countSteps is the number of model steps a record shows.
func countSteps(rec *orchestratorv1.Turn) int {
	var n int32
	for _, ev := range rec.GetEvents() {
		if c := ev.GetContext(); c != nil {
			n = max(n, c.GetStep())
		}
	}
	return int(n)
}

// loadTurn returns a turn's record; a RUNNING one is first ended if it is orphaned.
func (s *Service) loadTurn(ctx context.Context, turnID string) (*orchestratorv1.Turn, error) {
	t, err := s.deps.Store.GetTurn(ctx, turnID)
	if err != nil || t.GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_RUNNING {
		return t, err
	}
	ok, err := s.reapTurn(ctx, turnID)
	if err != nil {
		// The record as it stands is still the answer.
		s.log.Warn("running turn not checked for a lapsed lease", "turn", turnID, "error", err)
		return t, nil
	}
	if !ok {
		return t, nil
	}
	return s.deps.Store.GetTurn(ctx, turnID)
}
