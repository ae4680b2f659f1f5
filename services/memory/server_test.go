package memory

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hermes-agent/hermes/internal/rpc"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

const (
	pref  = memoryv1.MemoryType_MEMORY_TYPE_PREFERENCE
	fact  = memoryv1.MemoryType_MEMORY_TYPE_FACT
	event = memoryv1.MemoryType_MEMORY_TYPE_EVENT
)

func remember(t *testing.T, h *harness, req *memoryv1.RememberRequest) *memoryv1.RememberResponse {
	t.Helper()
	resp, err := h.client.Remember(ctxT(t), req)
	if err != nil {
		t.Fatalf("Remember(%q): %v", req.GetContent(), err)
	}
	return resp
}

func recallContents(t *testing.T, h *harness, req *memoryv1.RecallRequest) []string {
	t.Helper()
	resp, err := h.client.Recall(ctxT(t), req)
	if err != nil {
		t.Fatalf("Recall(%q): %v", req.GetQuery(), err)
	}
	out := []string{}
	for _, m := range resp.GetMemories() {
		out = append(out, m.GetMemory().GetContent())
	}
	return out
}

func TestRememberRecall(t *testing.T) {
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, b, harnessOpts{})
			r := remember(t, h, &memoryv1.RememberRequest{UserId: "alice", Type: pref, Content: "用户喜欢吃川菜，最常去的川菜馆是蜀香园", Subject: "restaurant",
				Attributes: map[string]string{"restaurant_name": "蜀香园"}, Keywords: []string{"订餐厅", "订位"}})
			if r.GetMemory().GetId() == "" || r.GetMemory().GetTier() != memoryv1.Tier_TIER_SEMANTIC {
				t.Errorf("remembered memory: %v", r.GetMemory())
			}
			remember(t, h, &memoryv1.RememberRequest{UserId: "alice", Type: pref, Content: "User prefers short, concise replies", Subject: "reply style"})
			remember(t, h, &memoryv1.RememberRequest{UserId: "bob", Type: pref, Content: "用户喜欢蜀香园的川菜", Subject: "restaurant"})

			resp, err := h.client.Recall(ctxT(t), &memoryv1.RecallRequest{UserId: "alice", Query: "我上次提到的那家川菜馆，帮我订个明天晚上7点两个人的位置"})
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.GetMemories()) != 1 {
				t.Fatalf("recalled %d memories, want 1: %v", len(resp.GetMemories()), resp)
			}
			got := resp.GetMemories()[0]
			if got.GetMemory().GetUserId() != "alice" || got.GetMemory().GetAttributes()["restaurant_name"] != "蜀香园" {
				t.Errorf("recalled %v", got.GetMemory())
			}
			if got.GetSimilarity() <= 0 || got.GetScore() <= 0 || !strings.Contains(got.GetReason(), "BM25 score") {
				t.Errorf("score %v similarity %v reason %q (threshold %v)", got.GetScore(), got.GetSimilarity(), got.GetReason(), resp.GetMinSimilarity())
			}
			if resp.GetEmbedder() != "lexical-bm25" {
				t.Errorf("embedder = %q", resp.GetEmbedder())
			}
			// The brief's session-2 request shares no word with the memory; its keywords and the
			// attribute lookup the orchestrator makes for a missing argument find it.
			c := recallContents(t, h, &memoryv1.RecallRequest{UserId: "alice", Query: "帮我订周六晚上7点4个人", AttributeKeys: []string{"restaurant_name"}})
			if d := cmp.Diff([]string{"用户喜欢吃川菜，最常去的川菜馆是蜀香园"}, c); d != "" {
				t.Errorf("attribute recall (-want +got):\n%s", d)
			}
			// English.
			c = recallContents(t, h, &memoryv1.RecallRequest{UserId: "alice", Query: "keep your replies concise please"})
			if d := cmp.Diff([]string{"User prefers short, concise replies"}, c); d != "" {
				t.Errorf("english recall (-want +got):\n%s", d)
			}
			// Another user's query never sees alice's memories, whatever it asks.
			for _, q := range []string{"川菜 蜀香园", "concise replies", "alice"} {
				resp, err := h.client.Recall(ctxT(t), &memoryv1.RecallRequest{UserId: "carol", Query: q, MinSimilarity: ptr(-1.0)})
				if err != nil {
					t.Fatal(err)
				}
				if len(resp.GetMemories()) != 0 {
					t.Errorf("carol's recall of %q returned %v", q, resp.GetMemories())
				}
			}
			h.svc.flushTouches()
			lr, err := h.client.ListMemories(ctxT(t), &memoryv1.ListMemoriesRequest{UserId: "alice", Types: []memoryv1.MemoryType{pref}})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range lr.GetMemories() {
				if m.GetContent() == "用户喜欢吃川菜，最常去的川菜馆是蜀香园" && (m.GetRecallCount() != 2 || m.GetLastRecalledAt() == nil) {
					t.Errorf("recall statistics: count %d last %v", m.GetRecallCount(), m.GetLastRecalledAt())
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestRecallAgeAndThresholdBeforeRecency(t *testing.T) {
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, b, harnessOpts{cfg: func(c *Config) { c.RecencyWeight = 0.9 }})
			now := h.clock.Now()
			h.clock.Set(now.Add(-40 * 24 * time.Hour))
			remember(t, h, &memoryv1.RememberRequest{UserId: "u", Type: pref, Content: "用户喜欢喝乌龙茶", Tier: memoryv1.Tier_TIER_SEMANTIC})
			remember(t, h, &memoryv1.RememberRequest{UserId: "u", Type: fact, Content: "用户对乌龙茶过敏的朋友叫小王", Tier: memoryv1.Tier_TIER_SEMANTIC})
			h.clock.Set(now.Add(-20 * 24 * time.Hour))
			remember(t, h, &memoryv1.RememberRequest{UserId: "u", Type: pref, Content: "用户周末喜欢喝乌龙茶配点心", Tier: memoryv1.Tier_TIER_SEMANTIC})
			h.clock.Set(now)
			remember(t, h, &memoryv1.RememberRequest{UserId: "u", Type: pref, Content: "用户开车上班，通勤四十分钟", Tier: memoryv1.Tier_TIER_SEMANTIC})
			// Other memories of the user, so that 乌龙茶 is a word some of them have, not most.
			for _, c := range []string{"用户住在杭州西湖区", "用户的女儿叫小雨", "用户每周三晚上打羽毛球", "用户的车牌是浙A12345", "用户在电商公司做产品经理", "用户养了一只柯基"} {
				remember(t, h, &memoryv1.RememberRequest{UserId: "u", Type: fact, Content: c, Tier: memoryv1.Tier_TIER_SEMANTIC})
			}

			got := recallContents(t, h, &memoryv1.RecallRequest{UserId: "u", Query: "乌龙茶"})
			sort.Strings(got)
			want := []string{"用户周末喜欢喝乌龙茶配点心", "用户对乌龙茶过敏的朋友叫小王"}
			sort.Strings(want)
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("30-day default: a 40-day-old preference is left out, a fact is not (-want +got):\n%s", d)
			}
			got = recallContents(t, h, &memoryv1.RecallRequest{UserId: "u", Query: "乌龙茶", MaxAge: durationpb.New(0)})
			if len(got) != 3 {
				t.Errorf("max_age 0 (no limit) recalled %v", got)
			}
			// A heavy recency weight still cannot let the brand-new, unrelated memory in.
			for _, c := range recallContents(t, h, &memoryv1.RecallRequest{UserId: "u", Query: "乌龙茶", MaxAge: durationpb.New(0)}) {
				if strings.Contains(c, "通勤") {
					t.Errorf("recency let an irrelevant memory in: %q", c)
				}
			}
		})
	}
}

func TestValidation(t *testing.T) {
	h := newHarness(t, "embedded", harnessOpts{})
	long := strings.Repeat("字", 700)
	tests := []struct {
		name   string
		call   func() error
		fields []string
	}{
		{"remember empty", func() error {
			_, err := h.client.Remember(ctxT(t), &memoryv1.RememberRequest{})
			return err
		}, []string{"user_id", "type", "content"}},
		{"remember too long, bad confidence", func() error {
			_, err := h.client.Remember(ctxT(t), &memoryv1.RememberRequest{UserId: "u", Type: fact, Content: long, Confidence: 2})
			return err
		}, []string{"content", "confidence"}},
		{"recall limit and query", func() error {
			_, err := h.client.Recall(ctxT(t), &memoryv1.RecallRequest{UserId: "u", Limit: 21})
			return err
		}, []string{"query", "limit"}},
		{"recall bad max age", func() error {
			_, err := h.client.Recall(ctxT(t), &memoryv1.RecallRequest{UserId: "u", Query: "x", MaxAge: durationpb.New(-time.Hour)})
			return err
		}, []string{"max_age"}},
		{"list bad token", func() error {
			_, err := h.client.ListMemories(ctxT(t), &memoryv1.ListMemoriesRequest{UserId: "u", PageToken: "garbage!", PageSize: 5000})
			return err
		}, []string{"page_size", "page_token"}},
		{"forget bad id", func() error {
			_, err := h.client.Forget(ctxT(t), &memoryv1.ForgetRequest{UserId: "u", MemoryId: "../../etc"})
			return err
		}, []string{"memory_id"}},
		{"user id with control characters", func() error {
			_, err := h.client.ForgetUser(ctxT(t), &memoryv1.ForgetUserRequest{UserId: "a\x00b"})
			return err
		}, []string{"user_id"}},
		{"extract without turn", func() error {
			_, err := h.client.ExtractTurn(ctxT(t), &memoryv1.ExtractTurnRequest{})
			return err
		}, []string{"turn"}},
		{"behaviour without key", func() error {
			_, err := h.client.RecordBehavior(ctxT(t), &memoryv1.RecordBehaviorRequest{UserId: "u"})
			return err
		}, []string{"key"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("code %v (%v), want InvalidArgument", status.Code(err), err)
			}
			var got []string
			for _, f := range rpc.FieldViolations(err) {
				got = append(got, f.GetField())
			}
			if d := cmp.Diff(tc.fields, got); d != "" {
				t.Errorf("fields (-want +got):\n%s", d)
			}
		})
	}
}

func TestForgetIsScopedToUser(t *testing.T) {
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, b, harnessOpts{})
			m := remember(t, h, &memoryv1.RememberRequest{UserId: "alice", Type: fact, Content: "alice's merchant id is M-23891"}).GetMemory()
			_, err := h.client.Forget(ctxT(t), &memoryv1.ForgetRequest{UserId: "mallory", MemoryId: m.GetId()})
			if status.Code(err) != codes.NotFound {
				t.Errorf("mallory forgetting alice's memory: %v, want NotFound", err)
			}
			if got := recallContents(t, h, &memoryv1.RecallRequest{UserId: "alice", Query: "merchant id M-23891"}); len(got) != 1 {
				t.Errorf("alice's memory after mallory's attempt: %v", got)
			}
			if _, err := h.client.Forget(ctxT(t), &memoryv1.ForgetRequest{UserId: "alice", MemoryId: m.GetId()}); err != nil {
				t.Fatal(err)
			}
			if got := recallContents(t, h, &memoryv1.RecallRequest{UserId: "alice", Query: "merchant id M-23891"}); len(got) != 0 {
				t.Errorf("after Forget: %v", got)
			}
			_, err = h.client.Forget(ctxT(t), &memoryv1.ForgetRequest{UserId: "alice", MemoryId: m.GetId()})
			if status.Code(err) != codes.NotFound {
				t.Errorf("second Forget: %v, want NotFound", err)
			}
		})
	}
}

func TestDuplicateAndContradiction(t *testing.T) {
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, b, harnessOpts{})
			a := remember(t, h, &memoryv1.RememberRequest{UserId: "u", Type: pref, Content: "用户喜欢喝拿铁", Subject: "coffee", Attributes: map[string]string{"drink": "拿铁"}})
			// The same statement again updates it.
			dup := remember(t, h, &memoryv1.RememberRequest{UserId: "u", Type: pref, Content: "用户喜欢喝拿铁", Subject: "Coffee", Attributes: map[string]string{"drink": "拿铁"}})
			if !dup.GetUpdatedExisting() || dup.GetMemory().GetId() != a.GetMemory().GetId() {
				t.Errorf("duplicate: updated %v id %s, want the existing %s", dup.GetUpdatedExisting(), dup.GetMemory().GetId(), a.GetMemory().GetId())
			}
			// A near duplicate without subject, with no conflicting attribute, too.
			near := remember(t, h, &memoryv1.RememberRequest{UserId: "u", Type: pref, Content: "用户喜欢喝拿铁。"})
			if !near.GetUpdatedExisting() {
				t.Errorf("near duplicate wrote a copy: %v", near.GetMemory())
			}
			// A change from A to B: B wins, A is expired with a pointer to B.
			bResp := remember(t, h, &memoryv1.RememberRequest{UserId: "u", Type: pref, Content: "用户现在改喝美式了", Subject: "coffee", Attributes: map[string]string{"drink": "美式"}})
			if d := cmp.Diff([]string{a.GetMemory().GetId()}, bResp.GetSupersededIds()); d != "" {
				t.Errorf("superseded (-want +got):\n%s", d)
			}
			// The same attribute key under another subject is not a contradiction.
			remember(t, h, &memoryv1.RememberRequest{UserId: "u", Type: pref, Content: "用户给同事买饮料时买拿铁", Subject: "gift", Attributes: map[string]string{"drink": "拿铁"}})

			lr, err := h.client.ListMemories(ctxT(t), &memoryv1.ListMemoriesRequest{UserId: "u", IncludeExpired: true})
			if err != nil {
				t.Fatal(err)
			}
			var liveCoffee, expired []*memoryv1.Memory
			for _, m := range lr.GetMemories() {
				switch {
				case m.GetExpiredAt() != nil:
					expired = append(expired, m)
				case m.GetSubject() == "coffee":
					liveCoffee = append(liveCoffee, m)
				}
			}
			if len(liveCoffee) != 1 || liveCoffee[0].GetAttributes()["drink"] != "美式" {
				t.Errorf("live coffee memories: %v", liveCoffee)
			}
			if len(expired) != 1 || expired[0].GetSupersededBy() != bResp.GetMemory().GetId() {
				t.Errorf("expired: %v", expired)
			}
			if len(lr.GetMemories()) != 3 {
				t.Errorf("%d memories in all, want 3", len(lr.GetMemories()))
			}
			// Expired memories are never recalled.
			for _, c := range recallContents(t, h, &memoryv1.RecallRequest{UserId: "u", Query: "拿铁 咖啡", MinSimilarity: ptr(0.0)}) {
				if c == "用户喜欢喝拿铁" {
					t.Errorf("an expired memory was recalled")
				}
			}
		})
	}
}

func TestListMemoriesPagination(t *testing.T) {
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, b, harnessOpts{})
			base := h.clock.Now()
			var want []string
			for i := range 7 {
				h.clock.Set(base.Add(time.Duration(i) * time.Second))
				typ := fact
				if i%2 == 1 {
					typ = event
				}
				m := remember(t, h, &memoryv1.RememberRequest{UserId: "u", Type: typ, Content: fmt.Sprintf("distinct memory number %d about topic%d", i, i*7919)}).GetMemory()
				want = append([]string{m.GetId()}, want...)
			}
			var got []string
			token := ""
			for page := 0; ; page++ {
				resp, err := h.client.ListMemories(ctxT(t), &memoryv1.ListMemoriesRequest{UserId: "u", PageSize: 3, PageToken: token})
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range resp.GetMemories() {
					got = append(got, m.GetId())
				}
				token = resp.GetNextPageToken()
				if token == "" {
					break
				}
				if page > 5 {
					t.Fatal("pagination does not end")
				}
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("ids newest first (-want +got):\n%s", d)
			}
			resp, err := h.client.ListMemories(ctxT(t), &memoryv1.ListMemoriesRequest{UserId: "u", Tier: memoryv1.Tier_TIER_EPISODIC})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range resp.GetMemories() {
				if m.GetType() != event || m.GetTier() != memoryv1.Tier_TIER_EPISODIC {
					t.Errorf("episodic list has %v in %v", m.GetType(), m.GetTier())
				}
			}
			if len(resp.GetMemories()) != 3 {
				t.Errorf("%d events listed, want 3", len(resp.GetMemories()))
			}
		})
	}
}

func TestRecordBehavior(t *testing.T) {
	t.Run("off by default", func(t *testing.T) {
		h := newHarness(t, "embedded", harnessOpts{})
		resp, err := h.client.RecordBehavior(ctxT(t), &memoryv1.RecordBehaviorRequest{UserId: "u", Key: "weather:tomorrow"})
		if err != nil || !resp.GetDisabled() {
			t.Errorf("RecordBehavior with implicit off = %v, %v", resp, err)
		}
	})
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, b, harnessOpts{cfg: func(c *Config) { c.ImplicitEnabled = true }})
			var written []int64
			for i := 1; i <= 6; i++ {
				resp, err := h.client.RecordBehavior(ctxT(t), &memoryv1.RecordBehaviorRequest{UserId: "u", Key: "weather:followup-tomorrow", Description: "用户问天气时总会追问明天的天气"})
				if err != nil {
					t.Fatal(err)
				}
				if resp.GetCount() != int64(i) {
					t.Errorf("call %d: count %d", i, resp.GetCount())
				}
				if resp.GetHabitWritten() {
					written = append(written, resp.GetCount())
				}
				if i >= 4 && resp.GetHabit().GetType() != memoryv1.MemoryType_MEMORY_TYPE_HABIT {
					t.Errorf("call %d: habit %v", i, resp.GetHabit())
				}
			}
			if d := cmp.Diff([]int64{4}, written); d != "" {
				t.Errorf("habit written at counts (-want +got):\n%s", d)
			}
			// Concurrent replicas counting the same behaviour write one habit.
			var wg sync.WaitGroup
			var mu sync.Mutex
			n := 0
			for range 12 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp, err := h.client.RecordBehavior(context.Background(), &memoryv1.RecordBehaviorRequest{UserId: "v", Key: "order:latte"})
					if err != nil {
						t.Error(err)
						return
					}
					if resp.GetHabitWritten() {
						mu.Lock()
						n++
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			lr, _ := h.client.ListMemories(ctxT(t), &memoryv1.ListMemoriesRequest{UserId: "v"})
			if n != 1 || len(lr.GetMemories()) != 1 {
				t.Errorf("concurrent: %d calls wrote, %d memories; want 1 and 1", n, len(lr.GetMemories()))
			}
		})
	}
}

func TestForgetUserLeavesNothing(t *testing.T) {
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, b, harnessOpts{cfg: func(c *Config) { c.ImplicitEnabled = true }, model: nil})
			remember(t, h, &memoryv1.RememberRequest{UserId: "gone", Type: pref, Content: "用户喜欢拿铁", Subject: "coffee", Attributes: map[string]string{"drink": "拿铁"}})
			remember(t, h, &memoryv1.RememberRequest{UserId: "gone", Type: pref, Content: "用户改喝美式", Subject: "coffee", Attributes: map[string]string{"drink": "美式"}})
			remember(t, h, &memoryv1.RememberRequest{UserId: "gone", Type: event, Content: "用户昨天在蜀香园吃饭"})
			for range 5 {
				if _, err := h.client.RecordBehavior(ctxT(t), &memoryv1.RecordBehaviorRequest{UserId: "gone", Key: "k"}); err != nil {
					t.Fatal(err)
				}
			}
			if err := h.svc.state.FinishTurn(ctxT(t), "gone", "turn-1", claimTurn(t, h.svc.state, "gone", "turn-1"), TurnRecord{}, time.Hour); err != nil {
				t.Fatal(err)
			}
			remember(t, h, &memoryv1.RememberRequest{UserId: "stays", Type: fact, Content: "another user's fact"})

			resp, err := h.client.ForgetUser(ctxT(t), &memoryv1.ForgetUserRequest{UserId: "gone"})
			if err != nil {
				t.Fatal(err)
			}
			want := &memoryv1.ForgetUserResponse{Memories: 3, Expired: 1, Counters: 1, ExtractionRecords: 1, Vectors: 4}
			if d := cmp.Diff(want.String(), resp.String()); d != "" {
				t.Errorf("counts (-want +got):\n%s", d)
			}
			switch b {
			case "embedded":
				n, err := h.bolt.countUserKeys("gone")
				if err != nil || n != 0 {
					t.Errorf("bolt keeps %d records of the user (%v)", n, err)
				}
				if n, _ := h.bolt.countUserKeys("stays"); n == 0 {
					t.Errorf("the other user's records went too")
				}
			case "redis+qdrant":
				if keys := h.redis.keys(userKeyPattern(h.prefix, "gone")); len(keys) != 0 {
					t.Errorf("Redis keeps %v", keys)
				}
				users := h.redis.keys(h.prefix + "users")
				_ = users
				if n, err := h.qs.countUser(ctxT(t), "gone"); err != nil || n != 0 {
					t.Errorf("Qdrant keeps %d points (%v)", n, err)
				}
				if n, _ := h.qs.countUser(ctxT(t), "stays"); n != 1 {
					t.Errorf("the other user's point count = %d", n)
				}
			}
			us, _ := h.svc.state.Users(ctxT(t))
			if d := cmp.Diff([]string{"stays"}, us); d != "" {
				t.Errorf("user registry (-want +got):\n%s", d)
			}
			lr, _ := h.client.ListMemories(ctxT(t), &memoryv1.ListMemoriesRequest{UserId: "gone", IncludeExpired: true})
			if len(lr.GetMemories()) != 0 {
				t.Errorf("ListMemories after ForgetUser: %v", lr.GetMemories())
			}
		})
	}
}

// slowTouch is a tier whose Touch takes its time, like a loaded backend.
type slowTouch struct {
	TierStore
	delay time.Duration
}

func (s slowTouch) Touch(ctx context.Context, userID string, ids []string, at time.Time) ([]string, error) {
	time.Sleep(s.delay)
	return s.TierStore.Touch(ctx, userID, ids, at)
}

// flushTouches returns only when the recalls queued before it are recorded, however long the
// write takes (it used to wait for the queue to empty and then sleep 20 ms).
func TestFlushTouchesWaitsForTheWrite(t *testing.T) {
	emb := NewLexicalEmbedder(DefaultConfig().LexicalDimensions)
	bs2, err := OpenBoltStore(filepath.Join(t.TempDir(), "m.db"), BoltOptions{EpisodicTTL: time.Hour, Embedder: emb.Name(), Dimension: emb.Dimension()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bs2.Close() })
	cfg := DefaultConfig()
	cfg.MaintenanceInterval = 0
	svc, err := NewService(cfg, Options{Episodic: slowTouch{bs2.Episodic(), 200 * time.Millisecond}, Semantic: slowTouch{bs2.Semantic(), 200 * time.Millisecond},
		State: bs2, Embedder: emb, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	ctx := context.Background()
	if _, err := svc.Remember(ctx, &memoryv1.RememberRequest{UserId: "u", Type: memoryv1.MemoryType_MEMORY_TYPE_FACT, Content: "the user's cat is called Miso"}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Recall(ctx, &memoryv1.RecallRequest{UserId: "u", Query: "what is my cat called"}); err != nil {
		t.Fatal(err)
	}
	svc.flushTouches()
	lr, err := svc.ListMemories(ctx, &memoryv1.ListMemoriesRequest{UserId: "u"})
	if err != nil {
		t.Fatal(err)
	}
	if n := lr.GetMemories()[0].GetRecallCount(); n != 1 {
		t.Errorf("recall count right after flushTouches = %d, want 1", n)
	}
}

// Dedup and contradiction respect who and what: the same words by two speakers are two
// memories, the same event on two days is two events, and one speaker's value never
// supersedes another speaker's.
func TestDedupRespectsWhoAndWhat(t *testing.T) {
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, b, harnessOpts{})
			day := time.Date(2026, 5, 7, 19, 0, 0, 0, time.UTC)
			ev := memoryv1.MemoryType_MEMORY_TYPE_EVENT
			say := func(speaker, text string, at time.Time) *memoryv1.RememberResponse {
				return remember(t, h, &memoryv1.RememberRequest{UserId: "conv", Type: ev, Content: text, Speaker: speaker, OccurredAt: timestamppb.New(at), Tier: memoryv1.Tier_TIER_SEMANTIC})
			}
			c1 := say("Caroline", "Thanks so much, see you at the support group tomorrow!", day)
			m1 := say("Melanie", "Thanks so much, see you at the support group tomorrow!", day.Add(time.Minute))
			if m1.GetUpdatedExisting() || m1.GetMemory().GetId() == c1.GetMemory().GetId() {
				t.Errorf("Melanie's line was merged into Caroline's memory")
			}
			again := say("Caroline", "Thanks so much, see you at the support group tomorrow!!", day.Add(2*time.Minute))
			if !again.GetUpdatedExisting() || again.GetMemory().GetId() != c1.GetMemory().GetId() {
				t.Errorf("the same speaker's repeat on the same day was not merged: %v", again.GetMemory())
			}
			later := say("Caroline", "Thanks so much, see you at the support group tomorrow!", day.Add(72*time.Hour))
			if later.GetUpdatedExisting() {
				t.Errorf("the same line three days later was merged into the first")
			}
			// Contradiction: one speaker's value does not supersede another's.
			pet := func(speaker, name string) *memoryv1.RememberResponse {
				return remember(t, h, &memoryv1.RememberRequest{UserId: "conv", Type: fact, Content: speaker + "'s dog is called " + name,
					Subject: "pet", Speaker: speaker, Attributes: map[string]string{"pet_name": name}})
			}
			pet("Caroline", "Oscar")
			if r := pet("Melanie", "Luna"); len(r.GetSupersededIds()) != 0 {
				t.Errorf("Melanie's dog superseded Caroline's: %v", r.GetSupersededIds())
			}
			if r := pet("Caroline", "Max"); len(r.GetSupersededIds()) != 1 {
				t.Errorf("Caroline's new dog name superseded %v, want her old one", r.GetSupersededIds())
			}
		})
	}
}

// Time: a memory keeps when it happened (now when not given), Recall filters by it and ranks a
// memory that happened in the time the query names first.
func TestRecallByTime(t *testing.T) {
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, b, harnessOpts{})
			now := h.clock.Now()
			ev := memoryv1.MemoryType_MEMORY_TYPE_EVENT
			at := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(now.Add(-d)) }
			old := remember(t, h, &memoryv1.RememberRequest{UserId: "u", Type: ev, Content: "The user went hiking on Mount Tai", OccurredAt: at(20 * 24 * time.Hour), Tier: memoryv1.Tier_TIER_SEMANTIC})
			recent := remember(t, h, &memoryv1.RememberRequest{UserId: "u", Type: ev, Content: "The user went hiking in the Xiangshan hills", OccurredAt: at(6 * 24 * time.Hour), Tier: memoryv1.Tier_TIER_SEMANTIC})
			unset := remember(t, h, &memoryv1.RememberRequest{UserId: "u", Type: ev, Content: "The user bought hiking boots", Tier: memoryv1.Tier_TIER_SEMANTIC})
			// Other memories, so that "hiking" is a word some of the user's memories have, not all.
			for _, c := range []string{"The user lives in Beijing", "The user's daughter is called Lily", "The user drinks oat lattes",
				"The user works as a nurse", "The user plays badminton on Wednesdays", "The user is allergic to peanuts"} {
				remember(t, h, &memoryv1.RememberRequest{UserId: "u", Type: fact, Content: c, Tier: memoryv1.Tier_TIER_SEMANTIC})
			}
			if !unset.GetMemory().GetOccurredAt().AsTime().Equal(now.Truncate(time.Nanosecond)) && unset.GetMemory().GetOccurredAt().AsTime().Sub(now).Abs() > time.Second {
				t.Errorf("occurred_at without one given = %v, want now %v", unset.GetMemory().GetOccurredAt().AsTime(), now)
			}
			ids := func(req *memoryv1.RecallRequest) []string {
				resp, err := h.client.Recall(ctxT(t), req)
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for _, m := range resp.GetMemories() {
					out = append(out, m.GetMemory().GetId())
				}
				return out
			}
			got := ids(&memoryv1.RecallRequest{UserId: "u", Query: "hiking", OccurredAfter: at(10 * 24 * time.Hour), OccurredBefore: at(time.Hour)})
			if d := cmp.Diff([]string{recent.GetMemory().GetId()}, got); d != "" {
				t.Errorf("filtered by occurred_at (-want +got):\n%s", d)
			}
			got = ids(&memoryv1.RecallRequest{UserId: "u", Query: "where did I go hiking last week?", ReferenceTime: timestamppb.New(now), MaxAge: durationpb.New(0)})
			if len(got) < 2 || got[0] != recent.GetMemory().GetId() || !slices.Contains(got, old.GetMemory().GetId()) {
				t.Errorf("last week: %v, want the hike of six days ago first (%s), the older one too", got, recent.GetMemory().GetId())
			}
			got = ids(&memoryv1.RecallRequest{UserId: "u", Query: "where did I go hiking three weeks ago?", ReferenceTime: timestamppb.New(now), MaxAge: durationpb.New(0)})
			if len(got) == 0 || got[0] != old.GetMemory().GetId() {
				t.Errorf("three weeks ago: %v, want the older hike first", got)
			}
		})
	}
}

// TestConversationLinks: a memory names the one written before it in its conversation (same
// user and session, at most conversationGap earlier); other sessions, other users, long pauses
// and a caller's own follows_id break or replace the link, on every backend.
func TestConversationLinks(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 18, 0, 0, 0, time.UTC)
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, b, harnessOpts{})
			say := func(user, session, text string, at time.Time, follows string) *memoryv1.Memory {
				return remember(t, h, &memoryv1.RememberRequest{UserId: user, Type: event, Content: text, SessionId: session,
					OccurredAt: timestamppb.New(at), FollowsId: follows}).GetMemory()
			}
			q := say("alice", "s1", "Are you still training for the Lisbon marathon?", t0, "")
			a := say("alice", "s1", "Yep, October 11th, and my knee hurts", t0.Add(time.Minute), "")
			other := say("alice", "s2", "Did you book the flights to Porto?", t0.Add(2*time.Minute), "")
			bob := say("bob", "s1", "The plumber comes on Tuesday", t0.Add(3*time.Minute), "")
			later := say("alice", "s1", "The physio said to rest two weeks", t0.Add(time.Minute+conversationGap+time.Second), "")
			own := say("alice", "s1", "Rosa gave me the weather pipeline", t0.Add(40*time.Minute), q.GetId())
			got := map[string]string{"q": q.GetFollowsId(), "a": a.GetFollowsId(), "other": other.GetFollowsId(), "bob": bob.GetFollowsId(), "later": later.GetFollowsId(), "own": own.GetFollowsId()}
			want := map[string]string{"q": "", "a": q.GetId(), "other": "", "bob": "", "later": "", "own": q.GetId()}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("follows_id (-want +got):\n%s", d)
			}
			// The question is found; the answer shares no word with the query, so it lends and
			// borrows nothing: a link never brings in a memory with no word of the query.
			resp, err := h.client.Recall(ctxT(t), &memoryv1.RecallRequest{UserId: "alice", Query: "When is the Lisbon marathon? Still training?"})
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, m := range resp.GetMemories() {
				ids = append(ids, m.GetMemory().GetId())
			}
			if !slices.Contains(ids, q.GetId()) || slices.Contains(ids, a.GetId()) {
				t.Errorf("recalled %v, want the question %s and not the answer %s", ids, q.GetId(), a.GetId())
			}
		})
	}
}
