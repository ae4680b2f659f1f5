package memory

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hermes-agent/hermes/internal/model/scripted"
)

// durableStatements are lasting facts about the user, generated from templates and word lists
// in English and Chinese, each with the attribute an extractor would give it (a number in digits
// where the user wrote it in words, a plural as the user wrote it or not).
func durableStatements() []extractCase {
	var out []extractCase
	for _, x := range []string{"peanuts", "shellfish", "penicillin", "cats", "tree nuts", "sesame"} {
		out = append(out, extractCase{"I'm allergic to " + x, "allergy", strings.TrimSuffix(x, "s")})
		out = append(out, extractCase{"Heads up, my daughter has a severe " + strings.TrimSuffix(x, "s") + " allergy", "allergy", x})
	}
	for _, d := range []string{"vegetarian", "vegan", "pescatarian", "gluten-free", "kosher"} {
		out = append(out, extractCase{"I'm " + d + ", by the way", "diet", d})
	}
	for _, n := range []struct{ w, d string }{{"four", "4"}, {"five", "5"}, {"three", "3"}, {"six", "6"}} {
		out = append(out, extractCase{"We're a family of " + n.w, "household_size", n.d})
		out = append(out, extractCase{"Our household is " + n.w + " people", "household_size", n.d})
	}
	for _, a := range []string{"14 Elm Street", "221B Baker Street", "9 Rue de Rivoli"} {
		out = append(out, extractCase{"I live at " + a, "address", a})
	}
	for _, n := range []string{"Priya", "Tom Becker", "Aiko"} {
		out = append(out, extractCase{"My name is " + n, "name", n})
	}
	for _, m := range []string{"I'm diabetic", "I use a wheelchair", "I'm pregnant", "I have asthma", "I'm hard of hearing", "I take blood pressure medication"} {
		out = append(out, extractCase{m, "medical", ""})
	}
	for _, x := range []string{"花生", "海鲜", "芒果", "青霉素", "猫毛", "牛奶"} {
		out = append(out, extractCase{"我对" + x + "过敏", "allergy", x})
		out = append(out, extractCase{"提醒一下，我儿子对" + x + "过敏", "allergy", x})
	}
	for _, d := range []string{"我吃素", "我是素食者", "我们家只吃清真", "我不吃猪肉", "我乳糖不耐受"} {
		out = append(out, extractCase{d, "diet", ""})
	}
	for _, n := range []struct{ w, d string }{{"四", "4"}, {"三", "3"}, {"五", "5"}, {"六", "6"}} {
		out = append(out, extractCase{"我们家一般" + n.w + "个人吃饭", "household_size", n.d})
		out = append(out, extractCase{"我家一家" + n.w + "口", "household_size", n.d})
	}
	for _, a := range []string{"朝阳区建国路88号", "徐汇区漕溪北路18号", "天河区体育西路5号"} {
		out = append(out, extractCase{"我住在" + a, "address", a})
	}
	for _, n := range []string{"王芳", "李雷", "陈静"} {
		out = append(out, extractCase{"我叫" + n, "name", n})
	}
	for _, m := range []string{"我有糖尿病", "我坐轮椅", "我怀孕了", "我有哮喘", "我听力不好", "我在吃降压药"} {
		out = append(out, extractCase{m, "medical", ""})
	}
	return out
}

// passingStatements mention a place or a thing once, with no preference and no lasting fact:
// a "preference" drawn from them is the article's Shanghai mistake.
func passingStatements() []extractCase {
	var out []extractCase
	for _, c := range []string{"Boston", "Osaka", "Lisbon", "Denver", "Nairobi", "Lima"} {
		out = append(out, extractCase{"I had sushi in " + c + " last week", "city", c})
		out = append(out, extractCase{"My flight connects through " + c + " tomorrow", "city", c})
		out = append(out, extractCase{"We stopped in " + c + " on the way back", "city", c})
		out = append(out, extractCase{"Is it raining in " + c + " right now?", "city", c})
	}
	for _, p := range []string{"Joe's Diner", "the Grand Hotel", "Central Park", "the Apple Store"} {
		out = append(out, extractCase{"Walked past " + p + " earlier", "place", p})
		out = append(out, extractCase{"A colleague mentioned " + p + " in a meeting", "place", p})
	}
	for _, c := range []string{"上海", "成都", "西安", "厦门", "青岛", "昆明"} {
		out = append(out, extractCase{"上周在" + c + "吃了顿火锅", "city", c})
		out = append(out, extractCase{"下周要在" + c + "转机", "city", c})
		out = append(out, extractCase{"我上个月去" + c + "出差了", "city", c})
		out = append(out, extractCase{c + "今天天气怎么样", "city", c})
	}
	for _, p := range []string{"蜀香园", "外婆家", "星巴克", "人民公园"} {
		out = append(out, extractCase{"昨天路过" + p, "place", p})
		out = append(out, extractCase{"同事说起过" + p, "place", p})
	}
	return out
}

type extractCase struct{ text, key, value string }

// TestExtractKeepsDurableFacts: durable statements typed "preference" with no preference cue are
// kept; passing mentions typed "preference" are dropped (or, being questions, not sent to the
// model). Both languages, generated.
func TestExtractKeepsDurableFacts(t *testing.T) {
	durable, passing := durableStatements(), passingStatements()
	if len(durable) < 60 || len(passing) < 60 {
		t.Fatalf("%d durable and %d passing statements, want at least 60 each", len(durable), len(passing))
	}
	reply := map[string]string{}
	for _, c := range append(append([]extractCase{}, durable...), passing...) {
		attrs := map[string]any{}
		if c.value != "" {
			attrs[c.key] = c.value
		}
		reply[c.text] = memoriesJSON(map[string]any{"type": "preference", "content": c.text, "confidence": 0.95, "subject": c.key, "attributes": attrs})
	}
	mc, _ := scriptedModel(t, func(req scripted.Request) scripted.Reply {
		p := req.LastUser()
		for _, line := range strings.Split(p, "\n") {
			if text, ok := strings.CutPrefix(line, "[U1] "); ok {
				if r, ok := reply[text]; ok {
					return scripted.Text(r)
				}
			}
		}
		return scripted.Text(`{"memories":[]}`)
	})
	h := newHarness(t, backends[0], harnessOpts{model: mc})
	kept := map[bool][2]int{}
	for i, c := range append(append([]extractCase{}, durable...), passing...) {
		isDurable := i < len(durable)
		r := extract(t, h, turn(fmt.Sprintf("dur-%d", i), "s1", userSays(c.text), assistantSays("OK")))
		got := outcomes(r)
		// A passing mention is dropped by the preference check or, when it only asks
		// something, never reaches the model (the pre-filter): no candidate at all.
		written := len(got) == 1 && got[0] == "written"
		ok := written == isDurable && (len(got) == 1 || !isDurable)
		n := kept[isDurable]
		if len(got) == 1 && got[0] == "written" {
			n[0]++
		} else {
			n[1]++
		}
		kept[isDurable] = n
		if !ok {
			t.Errorf("durable=%v %q: %v %v", isDurable, c.text, got, r.GetCandidates())
		}
	}
	t.Logf("durable: %d kept, %d dropped; passing: %d kept, %d dropped", kept[true][0], kept[true][1], kept[false][0], kept[false][1])
}
