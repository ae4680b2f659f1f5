package memory

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hermes-agent/hermes/internal/model/scripted"
	"github.com/hermes-agent/hermes/internal/textseg"
)

// labelled is one user message of an extraction set: durable when it states a lasting fact about
// the user (it must reach the extraction model), else a task, question or small talk.
type labelled struct {
	text, lang, kind string
	durable          bool
}

func prefilterSays(text string) (bool, string) {
	return worthExtracting(material{user: []string{text}}, false)
}

func heldOut(t *testing.T) []labelled {
	t.Helper()
	f, err := os.Open("testdata/prefilter_heldout.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []labelled
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.SplitN(line, "\t", 3)
		if len(f) != 3 || (f[0] != "D" && f[0] != "T") {
			t.Fatalf("bad line %q", line)
		}
		out = append(out, labelled{text: f[2], lang: f[1], kind: "held-out", durable: f[0] == "D"})
	}
	return out
}

// TestPrefilterHeldOut: phrasings written before the pre-filter's rules and words, never used to
// tune them: every durable one reaches extraction.
func TestPrefilterHeldOut(t *testing.T) {
	set := heldOut(t)
	skipped, tasks := 0, 0
	for _, c := range set {
		ok, why := prefilterSays(c.text)
		switch {
		case c.durable && !ok:
			t.Errorf("durable %s %q skipped (%s)", c.lang, c.text, why)
		case !c.durable:
			tasks++
			if !ok {
				skipped++
			} else {
				t.Logf("task %s %q extracted (%s)", c.lang, c.text, why)
			}
		}
	}
	t.Logf("held out: %d durable, all reach extraction; %d of %d tasks skipped (%.0f%%)", len(set)-tasks, skipped, tasks, 100*float64(skipped)/float64(tasks))
}

// prefilterSkipFloor is the least share of the generated ordinary turns the pre-filter must
// spare the model (measured: see bench/README.md, Memory).
const prefilterSkipFloor = 0.85

// TestPrefilterGenerated: on the generated extraction set, every durable statement reaches
// extraction (recall 100%), and at least prefilterSkipFloor of the ordinary turns are skipped.
func TestPrefilterGenerated(t *testing.T) {
	durable, tasks, events := extractionSet(6)
	if len(durable) < 300 || len(tasks) < 300 {
		t.Fatalf("%d durable and %d ordinary turns, want at least 300 each", len(durable), len(tasks))
	}
	type key struct{ lang, kind string }
	kept, total := map[key]int{}, map[key]int{}
	for _, c := range durable {
		ok, why := prefilterSays(c.text)
		if !ok {
			t.Errorf("durable %s/%s %q skipped (%s)", c.lang, c.kind, c.text, why)
		}
	}
	skipped := 0
	for _, c := range tasks {
		k := key{c.lang, c.kind}
		total[k]++
		ok, why := prefilterSays(c.text)
		if ok {
			t.Logf("ordinary %s/%s %q extracted (%s)", c.lang, c.kind, c.text, why)
			continue
		}
		kept[k]++
		skipped++
	}
	evKept := 0
	for _, c := range events {
		if ok, _ := prefilterSays(c.text); ok {
			evKept++
		}
	}
	for k, n := range total {
		t.Logf("ordinary %s/%s: %d of %d skipped", k.lang, k.kind, kept[k], n)
	}
	rate := float64(skipped) / float64(len(tasks))
	t.Logf("durable %s: all reach extraction; ordinary %s: %d skipped (%.1f%%); personal events %s: %d reach extraction",
		setSummary(durable), setSummary(tasks), skipped, 100*rate, setSummary(events), evKept)
	if rate < prefilterSkipFloor {
		t.Errorf("skip rate %.3f, want at least %.2f", rate, prefilterSkipFloor)
	}
}

// TestPrefilterSparesModelCalls: through ExtractTurn, with the pre-filter on (the default) a
// turn that only asks something makes no model call and writes nothing, every durable turn
// still makes its call, and a turn whose user asked to remember a tool's result is always
// extracted; with memory.extract-prefilter off every turn makes one call.
func TestPrefilterSparesModelCalls(t *testing.T) {
	durable, tasks, _ := extractionSet(1)
	durable, tasks = durable[:40], tasks[:40]
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("prefilter=%v", on), func(t *testing.T) {
			var calls atomic.Int64
			mc, _ := scriptedModel(t, func(scripted.Request) scripted.Reply {
				calls.Add(1)
				return scripted.Text(`{"memories":[]}`)
			})
			h := newHarness(t, "embedded", harnessOpts{model: mc, cfg: func(c *Config) { c.ExtractPrefilter = on }})
			count := func(cs []labelled) int64 {
				before := calls.Load()
				for _, c := range cs {
					extract(t, h, turn("pf-user", "s1", userSays(c.text), assistantSays("OK")))
				}
				return calls.Load() - before
			}
			want := int64(len(tasks))
			if on {
				want = 0
				for _, c := range tasks {
					if ok, _ := prefilterSays(c.text); ok {
						want++ // an ordinary turn the rules are unsure of ("Add … to my list")
					}
				}
				if want > int64(len(tasks))/4 {
					t.Fatalf("%d of %d ordinary turns pass the pre-filter", want, len(tasks))
				}
			}
			if got := count(tasks); got != want {
				t.Errorf("%d ordinary turns made %d extraction calls, want %d", len(tasks), got, want)
			}
			if got := count(durable); got != int64(len(durable)) {
				t.Errorf("%d durable turns made %d extraction calls, want one each", len(durable), got)
			}
			tf := turn("pf-user", "s1", userSays("Look up order 55812"), toolResult(`{"order":"55812","status":"shipped"}`), assistantSays("Shipped."))
			tf.RememberRequested = true
			before := calls.Load()
			extract(t, h, tf)
			if calls.Load()-before != 1 {
				t.Errorf("a turn whose user asked to remember a tool result made %d calls, want 1", calls.Load()-before)
			}
		})
	}
}

// BenchmarkPrefilter: the cost of the decision per turn, on the generated set and on the
// benchmark harness's calculator turn.
func BenchmarkPrefilter(b *testing.B) {
	durable, tasks, _ := extractionSet(2)
	all := append(durable, tasks...)
	b.Run("set", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			worthExtracting(material{user: []string{all[i%len(all)].text}}, false)
		}
	})
	b.Run("calculator", func(b *testing.B) {
		for b.Loop() {
			worthExtracting(material{user: []string{"请帮我算一下 12*7+3。"}}, false)
		}
	})
}

// FuzzPrefilter: whatever the user wrote, the pre-filter answers without panicking, and the same
// answer every time (a redelivered turn must be judged as it was).
func FuzzPrefilter(f *testing.F) {
	for _, s := range []string{"", "请帮我算一下 12*7+3。", "I'd like to book a table, at 7", "show me", "帮我", "1,000.5?", "Can you… 我想订，", "'s", "\xff\xfe"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ok1, why1 := prefilterSays(s)
		ok2, why2 := prefilterSays(s)
		if ok1 != ok2 || why1 != why2 {
			t.Fatalf("%q: %v %q then %v %q", s, ok1, why1, ok2, why2)
		}
	})
}

// TestPrefilterLexiconFramesHideNoCue: request frames are blanked before cues are looked for, so
// none may hold a cue of a lasting fact (a frame "remember me" would hide "remember") other than
// the verb of asking itself ("I'd like you to", "I need you to"); every list of the extraction
// section is filled in both languages.
func TestPrefilterLexiconFramesHideNoCue(t *testing.T) {
	lex := textseg.Cues()
	x := &lex.Extraction
	asking := map[string]bool{"like": true, "want": true, "need": true}
	for _, list := range [][]string{x.RequestFrames} {
		for _, f := range list {
			for kind, cues := range x.Cues {
				if c, ok := anyIn(f, cues); ok && !asking[c] {
					t.Errorf("frame or opener %q holds the %s cue %q", f, kind, c)
				}
			}
			if c, ok := anyIn(f, lex.Durable); ok {
				t.Errorf("frame or opener %q holds the durable cue %q", f, c)
			}
		}
	}
	for name, list := range map[string][]string{"firstPerson": x.FirstPerson, "phatic": x.Phatic, "requestFrames": x.RequestFrames,
		"requestLeads": x.RequestLeads, "taskVerbs": x.TaskVerbs, "requestMarkers": x.RequestMarkers, "narrative": x.Narrative} {
		latin, cjk := 0, 0
		for _, w := range list {
			if w[0] < 0x80 {
				latin++
			} else {
				cjk++
			}
		}
		if latin == 0 || cjk == 0 {
			t.Errorf("extraction.%s: %d English and %d Chinese entries, want both", name, latin, cjk)
		}
	}
}

// TestPrefilterReads: how single messages are read, beyond the generated set.
func TestPrefilterReads(t *testing.T) {
	for _, tc := range []struct {
		text string
		want bool
	}{
		{"请帮我算一下 12*7+3。", false},
		{"Show me the menu", false},                                 // the verb is the frame's first word
		{"能不能帮我订个位子", false},                                        // an A-not-A question is no constraint
		{"I'd like to book a table, at 7, near the station", false}, // fragments continue the request
		{"Book a table, spicy food is a no-go for me", true},        // a clause of its own
		{"Book a table for me", false},
		{"Can you remember that I'm vegan?", true},
		{"¿Puedes recordar que soy vegano?", true}, // a language the lexicon lacks: not a question by "?" alone
		{"Je suis allergique aux arachides", true},
		{"ピーナッツアレルギーです", true},
		{"3*7", false},
		{"", false},
		{strings.Repeat("What is 2+2? ", 400), true}, // long text always goes to the model
		{"来上海三年了", true},                             // a task verb telling what happened
		{"Thanks, see you next time", true},          // "next time" may announce a habit
	} {
		if got, why := prefilterSays(tc.text); got != tc.want {
			t.Errorf("%.60q: extract %v (%s), want %v", tc.text, got, why, tc.want)
		}
	}
	if ok, _ := worthExtracting(material{user: []string{"What is 2+2?"}, tools: []string{"4"}}, true); !ok {
		t.Error("a turn whose user asked to remember a tool result was skipped")
	}
	if ok, _ := worthExtracting(material{tools: []string{"4"}}, false); !ok {
		t.Error("tool results without user text were skipped")
	}
}

// TestPrefilterTerseFactAfterRequest: a fact put tersely after a request, without a verb of its
// own ("…, bad knees"), is not taken for a detail of the request; a number or a time is. Found in
// review with phrasings outside the generated and held-out sets.
func TestPrefilterTerseFactAfterRequest(t *testing.T) {
	for _, tc := range []struct {
		text    string
		extract bool
	}{
		{"find a hotel in Rome, ground floor, bad knees", true},
		{"order a pizza, hold the cheese, lactose", true},
		{"get me a cab to the airport, wheelchair user", true},
		{"帮我查下去杭州的高铁，老人晕车", true},
		{"帮我订个蛋糕，孩子麸质过敏", true},
		{"find a pharmacy, in a wheelchair", true},
		{"book a room, with diabetes", true},
		{"book a table, at 7, tomorrow", false},
		{"book a table, near the station", false},
		{"帮我订明天的机票，下午3点", false},
	} {
		if got, why := prefilterSays(tc.text); got != tc.extract {
			t.Errorf("%q: extract = %v (%s), want %v", tc.text, got, why, tc.extract)
		}
	}
}
