package orchestrator

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hermes-agent/hermes/internal/model"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

// fillCase is one turn of the explicit-beats-memory table: the user's message, the remembered
// value (and other known values of the attribute), whether the memory was recalled for the
// turn or only looked up, and the decision expected.
type fillCase struct {
	kind      string // reference, silent, explicit, negation, switch, mixed
	msg       string
	cand      string
	others    []string
	lookedUp  bool
	want      string
	userValue string // the value the user gave, when the rules can know it
}

var fillCases = []fillCase{
	// Plain references to the remembered value: fill.
	{kind: "reference", msg: "我上次提到的那家川菜馆，帮我订个明天晚上7点两个人的位置", cand: "蜀香园", want: fillFilled},
	{kind: "reference", msg: "还是老地方吧，周六中午三个人", cand: "蜀香园", want: fillFilled},
	{kind: "reference", msg: "就去上次那家，明晚7点", cand: "蜀香园", want: fillFilled},
	{kind: "reference", msg: "照旧，帮我订两个人的位子", cand: "蜀香园", want: fillFilled},
	{kind: "reference", msg: "订我常去的那家，周五晚上", cand: "蜀香园", want: fillFilled, lookedUp: true},
	{kind: "reference", msg: "Book my usual place for two at 7 tomorrow", cand: "Luigi's", want: fillFilled},
	{kind: "reference", msg: "Same place as last time, Friday at 8, four people", cand: "Luigi's", want: fillFilled, lookedUp: true},
	{kind: "reference", msg: "Get me a table at the usual spot tonight", cand: "Luigi's", want: fillFilled},
	{kind: "reference", msg: "Can you book my favorite restaurant for Saturday?", cand: "Luigi's", want: fillFilled},
	{kind: "reference", msg: "Let's go there again like always, 2 people 7pm", cand: "Luigi's", want: fillFilled},
	// The user names the remembered value itself: fill.
	{kind: "reference", msg: "帮我订蜀香园，明天晚上7点两个人", cand: "蜀香园", want: fillFilled},
	{kind: "reference", msg: "Book Luigi's for two at 7", cand: "Luigi's", want: fillFilled},
	// The message says nothing about it: fill when the memory was recalled for the turn, ask
	// when it was only looked up.
	{kind: "silent", msg: "帮我订个明天晚上7点两个人的川菜馆位置", cand: "蜀香园", want: fillFilled},
	{kind: "silent", msg: "帮我订个明天晚上7点两个人的位置", cand: "蜀香园", lookedUp: true, want: fillUnsure},
	{kind: "silent", msg: "Book a table for two tomorrow at 7", cand: "Luigi's", lookedUp: true, want: fillUnsure},
	{kind: "silent", msg: "Reserve an Italian dinner for 4 on Friday", cand: "Luigi's", want: fillFilled},
	// Another value, named explicitly: replaced.
	{kind: "explicit", msg: "去川味轩吧，帮我订明天晚上7点两个人", cand: "蜀香园", want: fillReplaced, userValue: "川味轩"},
	{kind: "explicit", msg: "这周改去川味轩，周六中午三个人", cand: "蜀香园", want: fillReplaced, userValue: "川味轩"},
	{kind: "explicit", msg: "订外婆家，明晚六点", cand: "蜀香园", others: []string{"外婆家"}, want: fillReplaced, userValue: "外婆家"},
	{kind: "explicit", msg: "帮我在聚丰园订个位子，周五晚上", cand: "蜀香园", want: fillReplaced, userValue: "聚丰园"},
	{kind: "explicit", msg: "Book Nopa for two at 7", cand: "Luigi's", others: []string{"Nopa"}, want: fillReplaced, userValue: "Nopa"},
	{kind: "explicit", msg: "Let's do Zuni Cafe this time, 4 people Friday", cand: "Luigi's", others: []string{"Zuni Cafe"}, want: fillReplaced, userValue: "Zuni Cafe"},
	{kind: "explicit", msg: "Table at Nopa instead, 8pm", cand: "Luigi's", want: fillReplaced},
	{kind: "explicit", msg: "这次订静安的那家新开的，明晚两个人", cand: "蜀香园", want: fillReplaced},
	// The remembered value turned down: rejected.
	{kind: "negation", msg: "这次不去蜀香园了，去川味轩吧，帮我订个明天晚上7点两个人的位置", cand: "蜀香园", want: fillRejected, userValue: "川味轩"},
	{kind: "negation", msg: "别订蜀香园，帮我找家安静点的", cand: "蜀香园", want: fillRejected},
	{kind: "negation", msg: "蜀香园就算了，太远", cand: "蜀香园", want: fillRejected},
	{kind: "negation", msg: "不想去蜀香园，订个别的", cand: "蜀香园", want: fillRejected},
	{kind: "negation", msg: "除了蜀香园都行，明晚两个人", cand: "蜀香园", want: fillRejected},
	{kind: "negation", msg: "不要蜀香园了，吃腻了", cand: "蜀香园", want: fillRejected},
	{kind: "negation", msg: "蜀香园不去了，换个地方", cand: "蜀香园", want: fillRejected},
	{kind: "negation", msg: "Not Luigi's this time, somewhere else for two", cand: "Luigi's", want: fillRejected},
	{kind: "negation", msg: "Don't book Luigi's, find something quieter", cand: "Luigi's", want: fillRejected},
	{kind: "negation", msg: "Anywhere but Luigi's tonight", cand: "Luigi's", want: fillRejected},
	{kind: "negation", msg: "Skip Luigi's, we went there last week", cand: "Luigi's", want: fillRejected},
	{kind: "negation", msg: "Book something for 4 instead of Luigi's", cand: "Luigi's", want: fillRejected},
	// Asking for a different one without naming it: replaced.
	{kind: "switch", msg: "换一家吧，明天晚上7点两个人", cand: "蜀香园", want: fillReplaced},
	{kind: "switch", msg: "这次想吃点别的，帮我订个位子", cand: "蜀香园", want: fillReplaced},
	{kind: "switch", msg: "订个其他的川菜馆，周六中午", cand: "蜀香园", want: fillReplaced},
	{kind: "switch", msg: "Somewhere else this time, table for two", cand: "Luigi's", want: fillReplaced},
	{kind: "switch", msg: "Let's try a new place on Friday", cand: "Luigi's", want: fillReplaced},
	{kind: "switch", msg: "Book a different restaurant for our anniversary", cand: "Luigi's", want: fillReplaced},
	// Mixed: a reference and a rejection, or another value and the remembered one.
	{kind: "mixed", msg: "上次那家不去了，蜀香园太吵", cand: "蜀香园", want: fillRejected},
	{kind: "mixed", msg: "不去川味轩了，还是蜀香园吧", cand: "蜀香园", others: []string{"川味轩"}, want: fillFilled},
	{kind: "mixed", msg: "Not Nopa — the usual, Luigi's, at 7", cand: "Luigi's", others: []string{"Nopa"}, want: fillFilled},
	{kind: "mixed", msg: "我们上次去的是蜀香园，这次换一家", cand: "蜀香园", want: fillReplaced},
}

// restaurantSlot is the argument of the table's cases.
var restaurantSlot = newArgSlot("restaurant_name", propertySchema{Type: json.RawMessage(`"string"`), Description: "the restaurant"}, "restaurant_name", nil)

func (c fillCase) options() []fillOption {
	opts := []fillOption{{value: mustJSON(c.cand), raw: c.cand, memoryID: "m-cand", inContext: !c.lookedUp}}
	for i, o := range c.others {
		opts = append(opts, fillOption{value: mustJSON(o), raw: o, memoryID: "m-other-" + string(rune('a'+i)), inContext: !c.lookedUp})
	}
	return opts
}

func mustJSON(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// TestFillDecisionRules: the rules alone decide every explicit and negation case right (and the
// table shows how they do on the others).
func TestFillDecisionRules(t *testing.T) {
	if len(fillCases) < 40 {
		t.Fatalf("%d cases, want at least 40", len(fillCases))
	}
	right := map[string][2]int{}
	for _, c := range fillCases {
		d := ruleDecision(c.msg, restaurantSlot, c.options())
		n := right[c.kind]
		n[1]++
		// A hold is a hold: a name the rules cannot tie to the argument without a dictionary
		// ("去川味轩吧") is unsure rather than replaced, and the held result still carries it.
		held := func(o string) bool { return o == fillReplaced || o == fillRejected || o == fillUnsure }
		ok := (d.outcome == c.want || c.want == fillReplaced && held(d.outcome)) && (c.userValue == "" || d.userValue == c.userValue)
		if ok {
			n[0]++
		}
		right[c.kind] = n
		switch {
		case !ok && (c.kind == "explicit" || c.kind == "negation"):
			t.Errorf("%s %q: %s (%s) user value %q, want %s %q", c.kind, c.msg, d.outcome, d.reason, d.userValue, c.want, c.userValue)
		case !ok:
			t.Logf("rules miss %s %q: %s (%s), want %s", c.kind, c.msg, d.outcome, d.reason, c.want)
		}
		if d.by != "rules" || d.option == nil || d.option.raw != c.cand {
			t.Errorf("%q: decided by %q about %v", c.msg, d.by, d.option)
		}
	}
	for k, n := range right {
		t.Logf("rules: %s %d/%d", k, n[0], n[1])
	}
}

// TestFillDecisionModel: with a decision model configured, the decision is the model's JSON
// answer, asked for in JSON mode with the decision prompt, the message, the argument's schema
// and the remembered values; every case comes out as the model says. An unusable answer falls
// back to the rules.
func TestFillDecisionModel(t *testing.T) {
	byMsg := map[string]fillCase{}
	for _, c := range fillCases {
		byMsg[c.msg] = c
	}
	var bad atomic.Bool
	var asked atomic.Int64
	srv, err := scripted.New(func(req scripted.Request) scripted.Reply {
		asked.Add(1)
		if !req.JSON || len(req.Messages) != 2 || req.Messages[0].Content != FillDecisionSystemPrompt {
			return scripted.Text("not a decision request")
		}
		var in struct {
			Message  string          `json:"message"`
			Argument string          `json:"argument"`
			Schema   json.RawMessage `json:"schema"`
			Values   []string        `json:"remembered_values"`
		}
		if json.Unmarshal([]byte(req.Messages[1].Content), &in) != nil || in.Argument != "restaurant_name" || len(in.Schema) == 0 || len(in.Values) == 0 {
			return scripted.Text("bad decision request: " + req.Messages[1].Content)
		}
		if bad.Load() {
			return scripted.Text("I think you should fill it.")
		}
		c := byMsg[in.Message]
		dec := c.want
		if dec == fillFilled {
			dec = "fill"
		}
		b, _ := json.Marshal(map[string]string{"decision": dec, "value": c.userValue, "reason": "scripted " + c.kind})
		return scripted.Text(string(b))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	mc, err := model.New(model.Config{BaseURL: srv.URL(), Model: "scripted-decider", MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	s := &Service{cfg: Config{FillDecisionModel: "turn"}, deps: Options{Model: mc}}
	prop := json.RawMessage(`{"type":"string","description":"the restaurant"}`)
	for _, c := range fillCases {
		tr := &turn{s: s, text: c.msg, model: "scripted-decider"}
		d := tr.decide(context.Background(), "restaurant_name", prop, c.options(), nil)
		if d.outcome != c.want || d.by != "model" || !strings.HasPrefix(d.reason, "model: scripted") {
			t.Errorf("%s %q: %s by %s (%s), want %s by the model", c.kind, c.msg, d.outcome, d.by, d.reason, c.want)
		}
	}
	if n := asked.Load(); n != int64(len(fillCases)) {
		t.Errorf("%d decision requests for %d cases", n, len(fillCases))
	}
	// An answer that is not the JSON asked for: the rules decide, and say why.
	bad.Store(true)
	c := fillCases[24] // the article's rejection
	tr := &turn{s: s, text: c.msg, model: "scripted-decider"}
	d := tr.decide(context.Background(), "restaurant_name", prop, c.options(), nil)
	if d.outcome != fillRejected || d.by != "rules" || !strings.Contains(d.reason, "decision model failed") {
		t.Errorf("unusable answer: %s by %s (%s), want rejected by the rules", d.outcome, d.by, d.reason)
	}
}

// The memory block shows when each memory happened, so "when did I…" can be answered from it.
func TestRenderMemoriesShowsDates(t *testing.T) {
	at := timestamppb.New(time.Date(2026, 5, 7, 19, 0, 0, 0, time.UTC))
	got := renderMemories([]*memoryv1.RecalledMemory{
		{Memory: &memoryv1.Memory{Type: memoryv1.MemoryType_MEMORY_TYPE_EVENT, Content: "The user ran a half marathon", OccurredAt: at}},
		{Memory: &memoryv1.Memory{Type: memoryv1.MemoryType_MEMORY_TYPE_FACT, Content: "The user lives in Hangzhou", CreatedAt: timestamppb.New(time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC))}},
	})
	for _, want := range []string{"- (event, 2026-05-07) The user ran a half marathon", "- (fact, 2026-01-02) The user lives in Hangzhou"} {
		if !strings.Contains(got, want) {
			t.Errorf("memory block %q lacks %q", got, want)
		}
	}
}

// BenchmarkFillDecision is the cost of deciding one fill: the rules alone, and the decision
// model (the scripted model, a real OpenAI-compatible HTTP server in process, answering at
// once: what remains is the request's own cost, a model's latency comes on top).
func BenchmarkFillDecision(b *testing.B) {
	c := fillCases[24]
	opts := c.options()
	prop := json.RawMessage(`{"type":"string"}`)
	b.Run("rules", func(b *testing.B) {
		for range b.N {
			if d := ruleDecision(c.msg, restaurantSlot, opts); d.outcome != fillRejected {
				b.Fatal(d.outcome)
			}
		}
	})
	b.Run("scripted-model", func(b *testing.B) {
		srv, err := scripted.New(func(scripted.Request) scripted.Reply {
			return scripted.Text(`{"decision":"rejected","value":"川味轩","reason":"the user turns it down"}`)
		})
		if err != nil {
			b.Fatal(err)
		}
		defer srv.Close()
		mc, err := model.New(model.Config{BaseURL: srv.URL(), Model: "scripted-decider", MaxRetries: -1})
		if err != nil {
			b.Fatal(err)
		}
		tr := &turn{s: &Service{cfg: Config{FillDecisionModel: "turn"}, deps: Options{Model: mc}}, text: c.msg, model: "scripted-decider"}
		b.ResetTimer()
		for range b.N {
			if d := tr.decide(context.Background(), "restaurant_name", prop, opts, nil); d.outcome != fillRejected || d.by != "model" {
				b.Fatal(d.outcome, d.by)
			}
		}
	})
}
