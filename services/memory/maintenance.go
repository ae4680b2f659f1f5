package memory

import (
	"context"
	"errors"
	"maps"
	"sort"
	"time"

	"github.com/hermes-agent/hermes/internal/backoff"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

// maintenanceLock is the lock name: one replica maintains at a time; the others skip.
const maintenanceLock = "maintenance"

// maintenanceLease bounds how long a crashed replica keeps the lock.
const maintenanceLease = 15 * time.Minute

// sweeper is a tier that must delete TTL-expired records itself (bbolt; Redis expires keys).
type sweeper interface {
	SweepExpired(ctx context.Context) (int64, error)
}

// maintain runs maintenance for one user or, with userID empty, for every user, under the
// maintenance lock, so replicas running the periodic job at the same time never maintain
// concurrently. Each step moves one memory at a time by writing it to its new place before
// removing it from the old one, so a crash in between leaves a copy for the next run's merge,
// never a loss.
func (s *Service) maintain(ctx context.Context, userID string) (*memoryv1.RunMaintenanceResponse, error) {
	unlock, ok, err := s.state.Lock(ctx, maintenanceLock, maintenanceLease)
	if err != nil {
		return nil, err
	}
	if !ok {
		return &memoryv1.RunMaintenanceResponse{Skipped: true}, nil
	}
	defer unlock()
	users := []string{userID}
	if userID == "" {
		if users, err = s.state.Users(ctx); err != nil {
			return nil, err
		}
	}
	resp := &memoryv1.RunMaintenanceResponse{}
	for _, t := range []TierStore{s.ep, s.sem} {
		if sw, ok := t.(sweeper); ok {
			n, err := sw.SweepExpired(ctx)
			if err != nil {
				return nil, err
			}
			resp.Deleted += n
		}
	}
	for _, u := range users {
		if err := ctx.Err(); err != nil {
			return resp, err
		}
		if err := s.maintainUser(ctx, u, resp); err != nil {
			return resp, err
		}
		resp.Users++
	}
	s.log.InfoContext(ctx, "memory maintenance", "users", resp.Users, "merged", resp.Merged, "promoted", resp.Promoted,
		"demoted", resp.Demoted, "deleted", resp.Deleted, "purged", resp.Purged)
	return resp, nil
}

type tiered struct {
	Entry
	tier memoryv1.Tier
}

func (s *Service) maintainUser(ctx context.Context, userID string, resp *memoryv1.RunMaintenanceResponse) error {
	now := s.now().UTC()
	var all []tiered
	for _, t := range []memoryv1.Tier{memoryv1.Tier_TIER_EPISODIC, memoryv1.Tier_TIER_SEMANTIC} {
		if err := s.tier(t).Scan(ctx, userID, func(e Entry) error {
			all = append(all, tiered{e, t})
			return nil
		}); err != nil {
			return err
		}
	}
	var lives []tiered
	for _, e := range all {
		m := e.Memory
		switch {
		case !live(m):
			// Superseded memories are kept for the retention period, then purged.
			if now.Sub(m.GetExpiredAt().AsTime()) >= s.cfg.ExpiredRetention {
				if _, err := s.tier(e.tier).Delete(ctx, userID, m.GetId()); err != nil {
					return err
				}
				resp.Purged++
			}
		case e.tier == memoryv1.Tier_TIER_EPISODIC && s.cfg.PromoteAfterRecalls > 0 && m.GetRecallCount() >= int64(s.cfg.PromoteAfterRecalls):
			if err := s.move(ctx, e, memoryv1.Tier_TIER_SEMANTIC, false); err != nil {
				return err
			}
			resp.Promoted++
			e.tier = memoryv1.Tier_TIER_SEMANTIC
			lives = append(lives, e)
		case e.tier == memoryv1.Tier_TIER_SEMANTIC && s.cfg.DemoteAfter > 0 && now.Sub(lastActive(m)) >= s.cfg.DemoteAfter:
			if err := s.move(ctx, e, memoryv1.Tier_TIER_EPISODIC, true); err != nil {
				return err
			}
			resp.Demoted++
			e.tier = memoryv1.Tier_TIER_EPISODIC
			lives = append(lives, e)
		case e.tier == memoryv1.Tier_TIER_EPISODIC && s.cfg.DeleteAfter > 0 && now.Sub(lastActive(m)) >= s.cfg.DeleteAfter:
			if _, err := s.ep.Delete(ctx, userID, m.GetId()); err != nil {
				return err
			}
			resp.Deleted++
		default:
			lives = append(lives, e)
		}
	}
	n, err := s.mergeDuplicates(ctx, userID, lives)
	resp.Merged += n
	return err
}

// move writes a memory into another tier and then deletes it from its old one. A demoted
// memory's recall count restarts, so that it is promoted again only by new recalls.
func (s *Service) move(ctx context.Context, e tiered, to memoryv1.Tier, demote bool) error {
	m := cloneMemory(e.Memory)
	m.Tier = to
	if demote {
		m.RecallCount = 0
		m.UpdatedAt = ts(s.now().UTC())
	}
	if err := s.tier(to).Put(ctx, Entry{Memory: m, Vector: e.Vector}); err != nil {
		return err
	}
	_, err := s.tier(e.tier).Delete(ctx, m.GetUserId(), m.GetId())
	return err
}

// mergeDuplicates folds near duplicates (the same who and what — sameWhoWhat — worded at least
// memory.merge-similarity alike) into the oldest of them: the union of attributes, keywords and source
// messages, the summed recall counts, the higher confidence; the newer copies are deleted. The
// probes are the memories changed since about two maintenance intervals ago (all of them when
// the periodic job is off), so a run costs one search per recently changed memory.
func (s *Service) mergeDuplicates(ctx context.Context, userID string, lives []tiered) (int64, error) {
	sort.Slice(lives, func(i, j int) bool {
		return lives[i].Memory.GetCreatedAt().AsTime().Before(lives[j].Memory.GetCreatedAt().AsTime())
	})
	var since time.Time
	if s.cfg.MaintenanceInterval > 0 {
		since = s.now().Add(-2 * s.cfg.MaintenanceInterval)
	}
	gone := map[string]bool{}
	var merged int64
	for _, keep := range lives {
		if gone[keep.Memory.GetId()] || keep.Memory.GetUpdatedAt().AsTime().Before(since) && keep.Memory.GetCreatedAt().AsTime().Before(since) {
			continue
		}
		q := SearchQuery{Lexical: lexQuery(keep.Memory.GetContent()), MinLexical: 1e-9, Limit: 8, Types: []memoryv1.MemoryType{keep.Memory.GetType()}}
		if len(keep.Vector) > 0 {
			q = SearchQuery{Vector: keep.Vector, MinSimilarity: s.cfg.MergeSimilarity, Limit: 8, Types: []memoryv1.MemoryType{keep.Memory.GetType()}}
		}
		var dups []tiered
		for _, t := range []memoryv1.Tier{memoryv1.Tier_TIER_SEMANTIC, memoryv1.Tier_TIER_EPISODIC} {
			hits, err := s.tier(t).Search(ctx, userID, q)
			if err != nil {
				return merged, err
			}
			for _, h := range hits {
				id := h.Memory.GetId()
				if id == keep.Memory.GetId() || gone[id] || !sameWhoWhat(keep.Memory, h.Memory) {
					continue
				}
				if len(keep.Vector) == 0 && contentSimilarity(keep.Memory.GetContent(), h.Memory.GetContent()) < s.cfg.MergeSimilarity {
					continue
				}
				// Only fold memories created after the keeper, so two probes never fold into
				// each other.
				if h.Memory.GetCreatedAt().AsTime().Before(keep.Memory.GetCreatedAt().AsTime()) {
					continue
				}
				dups = append(dups, tiered{h.Entry, t})
			}
		}
		if len(dups) == 0 {
			continue
		}
		// Re-read the keeper: an earlier fold in this run may have changed it.
		cur, err := s.tier(keep.tier).Get(ctx, userID, keep.Memory.GetId())
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return merged, err
		}
		k := cur.Memory
		for _, d := range dups {
			dm := d.Memory
			if k.Attributes == nil {
				k.Attributes = map[string]string{}
			}
			for key, v := range dm.GetAttributes() {
				if _, ok := k.Attributes[key]; !ok {
					k.Attributes[key] = v
				}
			}
			k.Keywords = appendNew(k.Keywords, dm.GetKeywords(), maxKeywords)
			k.SourceMessageIds = appendNew(k.SourceMessageIds, dm.GetSourceMessageIds(), maxSourceMessages)
			k.RecallCount += dm.GetRecallCount()
			k.Confidence = max(k.GetConfidence(), dm.GetConfidence())
			if dm.GetUpdatedAt().AsTime().After(k.GetUpdatedAt().AsTime()) {
				k.UpdatedAt = dm.GetUpdatedAt()
				k.Content = dm.GetContent()
			}
			if dm.GetLastRecalledAt().AsTime().After(k.GetLastRecalledAt().AsTime()) {
				k.LastRecalledAt = dm.GetLastRecalledAt()
			}
		}
		k.Attributes = maps.Clone(k.Attributes)
		vec, err := s.embedOne(ctx, embedText(k))
		if err != nil {
			return merged, err
		}
		if err := s.tier(keep.tier).Put(ctx, Entry{Memory: k, Vector: vec}); err != nil {
			return merged, err
		}
		for _, d := range dups {
			if _, err := s.tier(d.tier).Delete(ctx, userID, d.Memory.GetId()); err != nil {
				return merged, err
			}
			gone[d.Memory.GetId()] = true
			merged++
		}
	}
	return merged, nil
}

// maintenanceEvery spreads the maintenance period over [interval, 1.1·interval]: 1.05·interval
// ± 1/21 of it.
func maintenanceEvery(interval time.Duration) backoff.Policy {
	return backoff.Policy{Initial: interval * 21 / 20, Max: interval * 11 / 10, Jitter: 1.0 / 21}
}

// StartMaintenance runs maintenance every memory.maintenance-interval (with up to 10% jitter,
// so replicas started together do not contend every time) until Close. Replicas share the
// lock: a run that finds it held is skipped.
func (s *Service) StartMaintenance() {
	if s.cfg.MaintenanceInterval <= 0 {
		return
	}
	every := maintenanceEvery(s.cfg.MaintenanceInterval)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			select {
			case <-s.stop:
				return
			case <-time.After(every.Delay(0)):
			}
			ctx, cancel := context.WithTimeout(context.Background(), maintenanceLease)
			go func() {
				select {
				case <-s.stop:
					cancel()
				case <-ctx.Done():
				}
			}()
			if _, err := s.maintain(ctx, ""); err != nil && ctx.Err() == nil {
				s.log.Warn("memory maintenance failed", "error", err)
			}
			cancel()
		}
	}()
}
