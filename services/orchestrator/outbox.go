package orchestrator

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/hermes-agent/hermes/internal/lease"
	eventsv1 "github.com/hermes-agent/hermes/proto/hermes/events/v1"
)

const (
	// outboxInterval is how often the drainer looks for events that were not published.
	outboxInterval = 15 * time.Second
	// outboxBatch is how many entries one drain round reads.
	outboxBatch = 100
)

// DrainOutbox asks for a drain round now, for example because NATS reconnected.
func (s *Service) DrainOutbox() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// drainOutbox publishes what the outbox holds: at start (events of turns that finished while
// NATS was unreachable, or whose process died before publishing), on DrainOutbox and every
// outboxInterval. Each entry is claimed with a lease first, so two drainers never publish one
// event at once (JetStream's de-duplication by turn id covers a publishNow racing a drainer and a
// publish repeated after a crash).
func (s *Service) drainOutbox() {
	defer close(s.drained)
	t := time.NewTicker(outboxInterval)
	defer t.Stop()
	for {
		s.drainRound(s.drainCtx)
		select {
		case <-s.drainCtx.Done():
			return
		case <-t.C:
		case <-s.kick:
		}
	}
}

// drainRound publishes the entries it can claim, until one fails (NATS is likely down: the next
// round tries again) or the outbox is empty.
func (s *Service) drainRound(ctx context.Context) {
	for ctx.Err() == nil {
		entries, err := s.deps.Store.Outbox(ctx, outboxBatch)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("outbox not read", "error", err)
			}
			return
		}
		published := 0
		for _, ev := range entries {
			ok, err := s.publishClaimed(ctx, ev)
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn("turn.finished from the outbox not published yet; retrying later", "turn", ev.GetTurnId(), "error", err)
				}
				return
			}
			if ok {
				published++
			}
		}
		if published == 0 {
			return // empty, or every entry is being published by someone else
		}
		s.log.Info("published turn.finished events from the outbox", "events", published)
	}
}

// publishClaimed claims an outbox entry, publishes it within the publish timeout and deletes it.
// It reports false without error when another publisher holds the entry.
func (s *Service) publishClaimed(ctx context.Context, ev *eventsv1.TurnFinished) (bool, error) {
	leases := s.deps.Store.Leases()
	key := outboxKey(ev.GetTurnId())
	c, err := leases.Acquire(ctx, key, s.replica, nil, s.cfg.PublishTimeout+time.Minute)
	if err != nil || c.State != lease.Acquired {
		return false, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
		defer cancel()
		_, _ = leases.Release(rctx, key, s.replica)
	}()
	return true, s.publish(ctx, ev, nil)
}

// publish publishes an outbox entry within the publish timeout and deletes it; data is its
// encoding, or nil.
func (s *Service) publish(ctx context.Context, ev *eventsv1.TurnFinished, data []byte) error {
	pctx, cancel := context.WithTimeout(ctx, s.cfg.PublishTimeout)
	defer cancel()
	if err := s.deps.Publish(pctx, ev, data); err != nil {
		return err
	}
	dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer dcancel()
	if err := s.deps.Store.DeleteOutbox(dctx, ev.GetTurnId()); err != nil {
		// Published; the entry goes out again later and JetStream drops the duplicate.
		s.log.Warn("published turn.finished not removed from the outbox", "turn", ev.GetTurnId(), "error", err)
	}
	return nil
}

// publishNow publishes a finished turn's event in the background, bounded by the publish
// timeout; a failure leaves it in the outbox for the drainer and never fails the user's turn.
// It takes no claim on the entry: the drainers that might publish it too read the outbox every
// outboxInterval, and a publish repeated meanwhile is dropped by JetStream's de-duplication by
// turn id — a claim would cost two store round trips on every turn to save that rare duplicate.
func (s *Service) publishNow(ctx context.Context, ev *eventsv1.TurnFinished, data []byte) {
	s.bg.Add(1)
	s.workers.Go(func() {
		defer s.bg.Done()
		pctx := trace.ContextWithSpanContext(s.bgCtx, trace.SpanContextFromContext(ctx))
		if err := s.publish(pctx, ev, data); err != nil {
			s.log.Warn("turn.finished not published yet; it stays in the outbox and is retried", "turn", ev.GetTurnId(), "error", err)
		}
	})
}
