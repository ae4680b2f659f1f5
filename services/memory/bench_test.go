package memory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermes-agent/hermes/internal/model"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

var (
	benchZh  = strings.Fields("周末 爬山 川菜 咖啡 拿铁 高铁 酒店 出差 会议 周报 报销 女儿 生日 礼物 花生 过敏 跑步 西湖 杭州 上海 北京 成都 深圳 电影 音乐 周杰伦 小说 科幻 医保 体检 降压药 柯基 宠物 外卖 牛肉面 香菜 奶茶 少糖 去冰 工号 商家 销售额 代码 缩进 服务器 阿里云 故障 航班 靠窗 护照 签证 健身房 游泳 瑜伽 早餐 晚饭 火锅 烧烤 寿司 茶叶 龙井 红酒 啤酒 超市 宜家 优衣库 雨伞 羽绒服 耳机 手机 电脑 相机 手表 平板 快递 地址 母亲 父亲 同事 老板 客户 合同 预算 方案 设计稿 季度 目标 面试 简历 房租 水电费 停车费 车牌 保养 加油 地铁 公交 打车 机场 天气 下雨 台风 空调 暖气 绿萝 猫粮 狗粮")
	benchEn  = strings.Fields("weekend hiking coffee latte train hotel business trip meeting report expense daughter birthday gift peanut allergy running lake seattle boston denver movie music novel science fiction insurance checkup medicine dog cat takeout noodles cilantro tea sugar ice employee merchant sales code indent server cloud outage flight window passport visa gym swimming yoga breakfast dinner hotpot barbecue sushi wine beer grocery jacket umbrella headphones phone laptop camera watch tablet parcel address mother father colleague manager client contract budget proposal design quarter goal interview resume rent parking plate service fuel subway bus taxi airport weather rain storm heating plant")
	benchPre = []string{"用户喜欢", "用户每周", "用户讨厌", "用户上周", "用户通常", "User likes", "User usually", "User bought", "User prefers", "User went to"}
)

func benchSentence(r *rand.Rand) string {
	var b strings.Builder
	b.WriteString(benchPre[r.IntN(len(benchPre))])
	n := 4 + r.IntN(5)
	for range n {
		if r.IntN(2) == 0 {
			b.WriteString(benchZh[r.IntN(len(benchZh))])
		} else {
			b.WriteString(" " + benchEn[r.IntN(len(benchEn))] + " ")
		}
	}
	return b.String()
}

// loadBench fills an embedded store with n memories of one user and returns the service.
func loadBench(b *testing.B, n int) (*Service, *BoltStore, string) {
	b.Helper()
	cfg := DefaultConfig()
	cfg.MaintenanceInterval = 0
	emb := NewLexicalEmbedder(cfg.LexicalDimensions)
	path := filepath.Join(b.TempDir(), "bench.db")
	bs, err := OpenBoltStore(path, BoltOptions{EpisodicTTL: cfg.EpisodicTTL, Embedder: emb.Name(), Dimension: emb.Dimension(), NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = bs.Close() })
	r := rand.New(rand.NewPCG(1, uint64(n)))
	ctx := context.Background()
	now := time.Now()
	types := []memoryv1.MemoryType{pref, fact, event, memoryv1.MemoryType_MEMORY_TYPE_HABIT, memoryv1.MemoryType_MEMORY_TYPE_CONFIG}
	for i := range n {
		m := &memoryv1.Memory{Id: newID(), UserId: "bench", Type: types[i%len(types)], Content: benchSentence(r), Confidence: 0.9,
			Source: memoryv1.Source_SOURCE_EXPLICIT, CreatedAt: ts(now.Add(-time.Duration(r.IntN(40*24)) * time.Hour)), Tier: memoryv1.Tier_TIER_SEMANTIC}
		m.UpdatedAt = m.CreatedAt
		v, _ := emb.Embed(ctx, []string{embedText(m)})
		if err := bs.Semantic().Put(ctx, Entry{Memory: m, Vector: v[0]}); err != nil {
			b.Fatal(err)
		}
	}
	svc, err := NewService(cfg, Options{Episodic: bs.Episodic(), Semantic: bs.Semantic(), State: bs, Embedder: emb, Logger: testLogger()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(svc.Close)
	return svc, bs, path
}

// BenchmarkRecall measures Recall (query embedding, exact search of both tiers, reading the
// hits, weighting) on the embedded index with 1k, 10k and 100k memories of one user, and
// reports p50/p99 latency and the heap the index holds per 100k memories.
func BenchmarkRecall(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		// Loaded once per size, outside the sub-benchmark that the framework reruns for b.N.
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		svc, bs, path := loadBench(b, n)
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		heap := float64(after.HeapAlloc) - float64(before.HeapAlloc)
		fi, _ := os.Stat(path)
		r := rand.New(rand.NewPCG(7, 7))
		queries := make([]string, 256)
		for i := range queries {
			queries[i] = benchSentence(r)
		}
		b.Run(fmt.Sprintf("memories=%d", n), func(b *testing.B) {
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			found := 0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				out, err := svc.recall(ctx, recallParams{userID: "bench", query: queries[i%len(queries)], limit: 5, minSimilarity: svc.minSimilarity(), maxAge: 30 * 24 * time.Hour})
				if err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
				found += len(out)
			}
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds())/1000, "p99-ms")
			b.ReportMetric(heap/float64(n)*100_000/(1<<20), "heap-MiB/100k")
			b.ReportMetric(float64(fi.Size())/float64(n)*100_000/(1<<20), "file-MiB/100k")
			b.ReportMetric(float64(found)/float64(b.N), "hits/op")
		})
		svc.Close()
		_ = bs.Close()
	}
}

// BenchmarkRecallNoMemories measures a recall for a user with no memories, every new user's
// and many a turn's: both tiers are searched and find nothing, so what it shows is the
// overhead around the searches.
func BenchmarkRecallNoMemories(b *testing.B) {
	svc, bs, _ := loadBench(b, 10)
	defer func() { _ = bs.Close() }()
	defer svc.Close()
	ctx := context.Background()
	for b.Loop() {
		if _, err := svc.recall(ctx, recallParams{userID: "nobody", query: "请帮我算一下 3*4+5。", limit: 5, minSimilarity: svc.minSimilarity(), maxAge: 30 * 24 * time.Hour}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExtract measures ExtractTurn end to end with the scripted model (a real
// OpenAI-compatible HTTP server in process, through internal/model): the model call, parsing,
// grounding, dedupe and contradiction checks, and the writes, on the embedded store.
func BenchmarkExtract(b *testing.B) {
	var calls atomic.Int64
	srv, err := scripted.New(func(req scripted.Request) scripted.Reply {
		calls.Add(1)
		p := req.LastUser()
		i := strings.Index(p, "编号")
		return scripted.Text(memoriesJSON(map[string]any{"type": "fact", "content": "用户的" + strings.Fields(p[i:])[0], "confidence": 0.95,
			"subject": "number", "attributes": map[string]any{}}))
	})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	mc, err := newBenchModel(srv.URL())
	if err != nil {
		b.Fatal(err)
	}
	cfg := DefaultConfig()
	emb := NewLexicalEmbedder(cfg.LexicalDimensions)
	bs, err := OpenBoltStore(filepath.Join(b.TempDir(), "x.db"), BoltOptions{EpisodicTTL: time.Hour, Embedder: emb.Name(), Dimension: emb.Dimension()})
	if err != nil {
		b.Fatal(err)
	}
	defer bs.Close()
	svc, err := NewService(cfg, Options{Episodic: bs.Episodic(), Semantic: bs.Semantic(), State: bs, Embedder: emb, Model: mc, Logger: testLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer svc.Close()
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		tf := turn("bench", "s", userSays(fmt.Sprintf("记住我的编号%06d号 以后用得上", i)))
		resp, err := svc.extract(ctx, tf)
		if err != nil || len(resp.GetMemories()) != 1 {
			b.Fatalf("extract: %v %v", resp, err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "turns/s")
}

func newBenchModel(url string) (Completer, error) {
	return model.New(model.Config{BaseURL: url, Model: "scripted-extractor", MaxRetries: -1})
}
