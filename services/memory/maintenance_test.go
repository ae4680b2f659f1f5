package memory

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

// seedMaintenance writes, straight into the tiers (past the write path's dedupe), one memory
// for every maintenance rule, and returns their ids.
func seedMaintenance(t *testing.T, svc *Service, user string, now time.Time) map[string]string {
	t.Helper()
	ctx := context.Background()
	ids := map[string]string{}
	put := func(name string, tier memoryv1.Tier, typ memoryv1.MemoryType, content string, updated time.Time, mod func(*memoryv1.Memory)) {
		m := &memoryv1.Memory{Id: newID(), UserId: user, Type: typ, Content: content, Confidence: 0.9, Source: memoryv1.Source_SOURCE_EXPLICIT,
			CreatedAt: ts(updated), UpdatedAt: ts(updated), Tier: tier}
		if mod != nil {
			mod(m)
		}
		v, err := svc.embedOne(ctx, embedText(m))
		if err != nil {
			t.Fatal(err)
		}
		if err := svc.tier(tier).Put(ctx, Entry{Memory: m, Vector: v}); err != nil {
			t.Fatal(err)
		}
		if err := svc.state.AddUser(ctx, user); err != nil {
			t.Fatal(err)
		}
		ids[name] = m.Id
	}
	sem, ep := memoryv1.Tier_TIER_SEMANTIC, memoryv1.Tier_TIER_EPISODIC
	put("dupOld", sem, pref, "用户喜欢在周末去爬山，尤其是秋天", now.Add(-2*time.Minute), func(m *memoryv1.Memory) { m.RecallCount = 2 })
	put("dupNew", ep, pref, "用户喜欢在周末去爬山，尤其是秋天。", now.Add(-time.Minute), func(m *memoryv1.Memory) {
		m.RecallCount = 1
		m.Attributes = map[string]string{"activity": "爬山"}
	})
	put("stale", sem, fact, "用户以前在武汉读过大学", now.Add(-90*24*time.Hour), nil)
	put("forgotten", ep, event, "用户十天前去过一次宜家", now.Add(-10*24*time.Hour), nil)
	put("superseded", sem, pref, "用户喜欢喝拿铁", now.Add(-60*24*time.Hour), func(m *memoryv1.Memory) {
		m.ExpiredAt = ts(now.Add(-40 * 24 * time.Hour))
		m.SupersededBy = newID()
	})
	put("popular", ep, pref, "用户晚上喜欢听播客", now.Add(-time.Hour), func(m *memoryv1.Memory) {
		m.RecallCount = 3
		m.LastRecalledAt = ts(now.Add(-time.Minute))
	})
	put("fresh", sem, fact, "用户的工号是E10086", now.Add(-time.Hour), nil)
	return ids
}

func TestRunMaintenance(t *testing.T) {
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, b, harnessOpts{})
			now := h.clock.Now()
			ids := seedMaintenance(t, h.svc, "m", now)
			seedMaintenance(t, h.svc, "other", now)

			resp, err := h.client.RunMaintenance(ctxT(t), &memoryv1.RunMaintenanceRequest{UserId: "m"})
			if err != nil {
				t.Fatal(err)
			}
			want := &memoryv1.RunMaintenanceResponse{Merged: 1, Demoted: 1, Deleted: 1, Purged: 1, Promoted: 1, Users: 1}
			if d := cmp.Diff(want.String(), resp.String()); d != "" {
				t.Errorf("report (-want +got):\n%s", d)
			}
			lr, err := h.client.ListMemories(ctxT(t), &memoryv1.ListMemoriesRequest{UserId: "m", IncludeExpired: true})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]*memoryv1.Memory{}
			var tiers []string
			for _, m := range lr.GetMemories() {
				got[m.GetId()] = m
				tiers = append(tiers, m.GetContent()+" "+m.GetTier().String())
			}
			sort.Strings(tiers)
			wantTiers := []string{
				"用户以前在武汉读过大学 TIER_EPISODIC",
				"用户喜欢在周末去爬山，尤其是秋天。 TIER_SEMANTIC",
				"用户晚上喜欢听播客 TIER_SEMANTIC",
				"用户的工号是E10086 TIER_SEMANTIC",
			}
			if d := cmp.Diff(wantTiers, tiers); d != "" {
				t.Errorf("memories after maintenance (-want +got):\n%s", d)
			}
			kept := got[ids["dupOld"]]
			if kept == nil || kept.GetRecallCount() != 3 || kept.GetAttributes()["activity"] != "爬山" {
				t.Errorf("merged memory: %v", kept)
			}
			if d := got[ids["stale"]]; d == nil || d.GetRecallCount() != 0 {
				t.Errorf("demoted memory: %v", d)
			}
			// The other user's memories are untouched by a run scoped to "m".
			other, _ := h.client.ListMemories(ctxT(t), &memoryv1.ListMemoriesRequest{UserId: "other", IncludeExpired: true})
			if len(other.GetMemories()) != 7 {
				t.Errorf("the other user has %d memories, want 7", len(other.GetMemories()))
			}
			// A second run has nothing left to do.
			again, err := h.client.RunMaintenance(ctxT(t), &memoryv1.RunMaintenanceRequest{UserId: "m"})
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff((&memoryv1.RunMaintenanceResponse{Users: 1}).String(), again.String()); d != "" {
				t.Errorf("second run (-want +got):\n%s", d)
			}
			// All users.
			all, err := h.client.RunMaintenance(ctxT(t), &memoryv1.RunMaintenanceRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if all.GetUsers() != 2 || all.GetMerged() != 1 {
				t.Errorf("all-users run: %v", all)
			}
		})
	}
}

// Replicas running maintenance at once: one works, the others skip, and the work is done once.
func TestMaintenanceWithSeveralReplicas(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaintenanceInterval = 0
	st := sharedStores(t, 0)
	var replicas []*Service
	for range 3 {
		replicas = append(replicas, newReplica(t, st, cfg, nil))
	}
	seedMaintenance(t, replicas[0], "r", time.Now())
	var wg sync.WaitGroup
	results := make([]*memoryv1.RunMaintenanceResponse, len(replicas))
	for i, r := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := r.maintain(context.Background(), "")
			if err != nil {
				t.Error(err)
				return
			}
			results[i] = resp
		}()
	}
	wg.Wait()
	var merged, demoted, deleted, purged, promoted, ran int64
	for _, r := range results {
		if r == nil {
			continue
		}
		if !r.GetSkipped() {
			ran++
		}
		merged += r.GetMerged()
		demoted += r.GetDemoted()
		deleted += r.GetDeleted()
		purged += r.GetPurged()
		promoted += r.GetPromoted()
	}
	if merged != 1 || demoted != 1 || deleted != 1 || purged != 1 || promoted != 1 || ran < 1 {
		t.Errorf("across replicas: ran %d, merged %d demoted %d deleted %d purged %d promoted %d; want each once", ran, merged, demoted, deleted, purged, promoted)
	}
	if mems := listAll(t, replicas[1], "r"); len(mems) != 4 {
		t.Errorf("%d memories left, want 4", len(mems))
	}
	// While one replica holds the lock, another's run is skipped.
	unlock, ok, err := st.state.Lock(context.Background(), maintenanceLock, time.Minute)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	defer unlock()
	resp, err := replicas[2].maintain(context.Background(), "")
	if err != nil || !resp.GetSkipped() {
		t.Errorf("run while locked: %v %v", resp, err)
	}
}
