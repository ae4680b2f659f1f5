package memory

import (
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

var benchWords = strings.Fields(`coffee tea latte restaurant dinner lunch flight hotel train seat window aisle
meeting report budget project deadline doctor dentist appointment gym running yoga book movie music concert
birthday gift daughter son wife husband mother father dog cat garden kitchen recipe vegetarian allergy peanut
川菜 火锅 咖啡 拿铁 酒店 高铁 靠窗 会议 周报 预算 项目 医生 体检 跑步 瑜伽 电影 音乐 生日 礼物 女儿 儿子 妈妈 小狗 花园`)

func randomText(r *rand.Rand) string {
	n := 3 + r.IntN(10)
	w := make([]string, n)
	for i := range w {
		w[i] = benchWords[r.IntN(len(benchWords))]
	}
	return strings.Join(w, " ")
}

// The inverted index scores exactly what a scan over the entries (the Redis tier's search)
// scores, through puts, replacements and deletions, with filters and thresholds.
func TestLexicalIndexMatchesScan(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	x := newVectorIndex(0)
	now := time.Now()
	byID := map[string]*memoryv1.Memory{}
	var ids []string
	for i := range 2000 {
		m := &memoryv1.Memory{Id: newID(), UserId: "u", Type: memoryv1.MemoryType(1 + i%5), Content: randomText(r),
			UpdatedAt: ts(now.Add(-time.Duration(i) * time.Hour)), CreatedAt: ts(now.Add(-time.Duration(i) * time.Hour))}
		if i%17 == 0 {
			m.ExpiredAt = ts(now)
		}
		x.put("u", m, nil)
		byID[m.Id] = m
		ids = append(ids, m.Id)
		if i%7 == 0 { // replace an earlier one
			old := byID[ids[r.IntN(len(ids))]]
			nm := cloneMemory(old)
			nm.Content = randomText(r)
			x.put("u", nm, nil)
			byID[nm.Id] = nm
		}
		if i%11 == 0 { // delete one
			j := r.IntN(len(ids))
			x.remove("u", ids[j])
			delete(byID, ids[j])
			ids = append(ids[:j], ids[j+1:]...)
		}
	}
	var all []Entry
	for _, id := range ids {
		all = append(all, Entry{Memory: byID[id]})
	}
	for q := range 200 {
		sq := SearchQuery{Lexical: lexQuery(randomText(r) + " unseenword"), MinLexical: r.Float64() * 3, Limit: 1 + r.IntN(20)}
		if q%3 == 0 {
			sq.Types = []memoryv1.MemoryType{pref, fact}
		}
		if q%4 == 0 {
			sq.UpdatedAfter = now.Add(-1000 * time.Hour)
		}
		n, df := x.docFreq("u", sq.Lexical.idx)
		idf := make([]float32, len(df))
		for i := range df {
			idf[i] = bm25IDF(n, df[i])
		}
		got := x.search("u", sq, idf, now)
		var want []scored
		for _, h := range searchEntries(all, sq, now) {
			want = append(want, scored{h.Memory.GetId(), h.Similarity})
		}
		// Equal scores come in either order, and a tie at the limit may keep either memory:
		// compare the scores, and the memories scoring above the last one.
		canon := func(l []scored) ([]float64, []string) {
			var sims []float64
			var ids []string
			for _, s := range l {
				sims = append(sims, math.Round(s.sim*1e4)/1e4)
			}
			for _, s := range l {
				if len(l) > 0 && s.sim > l[len(l)-1].sim+1e-4 {
					ids = append(ids, s.id)
				}
			}
			sort.Strings(ids)
			return sims, ids
		}
		ws, wi := canon(want)
		gs, gi := canon(got)
		if d := cmp.Diff(ws, gs, cmpopts.EquateApprox(0, 2e-4)); d != "" {
			t.Fatalf("query %d: scores, scan vs index (-scan +index):\n%s", q, d)
		}
		if d := cmp.Diff(wi, gi); d != "" {
			t.Fatalf("query %d: memories, scan vs index (-scan +index):\n%s", q, d)
		}
	}
	if n, _ := x.docFreq("u", nil); n != len(ids) {
		t.Errorf("index holds %d memories, want %d", n, len(ids))
	}
}
