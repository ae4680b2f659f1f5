package memory

import (
	"context"
	"fmt"
	"strings"

	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

// recordBehavior counts a behaviour and writes one habit memory once the count passes the
// threshold; the state store's atomic claim makes that one memory even with several replicas.
func (s *Service) recordBehavior(ctx context.Context, req *memoryv1.RecordBehaviorRequest) (*memoryv1.RecordBehaviorResponse, error) {
	if !s.cfg.ImplicitEnabled {
		return &memoryv1.RecordBehaviorResponse{Disabled: true}, nil
	}
	user, key := req.GetUserId(), req.GetKey()
	n, claim, habitID, err := s.state.CountBehavior(ctx, user, key, s.now(), s.cfg.BehaviorWindow, s.cfg.HabitThreshold)
	if err != nil {
		return nil, err
	}
	resp := &memoryv1.RecordBehaviorResponse{Count: n}
	if habitID != "" {
		for _, t := range []memoryv1.Tier{memoryv1.Tier_TIER_SEMANTIC, memoryv1.Tier_TIER_EPISODIC} {
			if e, err := s.tier(t).Get(ctx, user, habitID); err == nil {
				e.Memory.Tier = t
				resp.Habit = e.Memory
				return resp, nil
			}
		}
		// The habit memory was forgotten: release the record so the next count writes it anew.
		if err := s.state.SetHabit(ctx, user, key, ""); err != nil {
			return nil, err
		}
		return resp, nil
	}
	if !claim {
		return resp, nil
	}
	desc := strings.TrimSpace(req.GetDescription())
	if desc == "" {
		desc = fmt.Sprintf("用户的习惯 (user habit): %s", key)
	}
	res, err := s.write(ctx, user, candidate{
		typ: memoryv1.MemoryType_MEMORY_TYPE_HABIT, content: desc, attributes: map[string]string{"behavior": key},
		subject: "habit " + key, confidence: 0.9, source: memoryv1.Source_SOURCE_IMPLICIT,
		tier: memoryv1.Tier_TIER_SEMANTIC, sessionID: req.GetSessionId(), id: derivedID("habit", user, key),
	})
	if err != nil {
		_ = s.state.SetHabit(context.WithoutCancel(ctx), user, key, "")
		return nil, err
	}
	if err := s.state.SetHabit(ctx, user, key, res.memory.GetId()); err != nil {
		return nil, err
	}
	res.memory.Tier = memoryv1.Tier_TIER_SEMANTIC
	resp.Habit = res.memory
	resp.HabitWritten = true
	return resp, nil
}
