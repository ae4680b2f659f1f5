package orchestrator

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hermes-agent/hermes/internal/tokenizer"
)

// pickStepsByMap is pickSteps as it was written first (a map of every call): the reference the
// allocation-free version must agree with.
func pickStepsByMap(all []Step, n int) []Step {
	type call struct{ tool, args string }
	seen := make(map[call]bool, len(all))
	var uniq []int
	for i := len(all) - 1; i >= 0; i-- {
		k := call{all[i].Tool, all[i].Arguments}
		if !seen[k] {
			seen[k] = true
			uniq = append(uniq, i)
		}
	}
	keep := make([]bool, len(all))
	kept := 0
	for _, i := range uniq {
		if kept < n && all[i].IdempotencyKey != "" {
			keep[i] = true
			kept++
		}
	}
	for _, i := range uniq {
		if kept < n && !keep[i] {
			keep[i] = true
			kept++
		}
	}
	var out []Step
	for i, s := range all {
		if keep[i] {
			out = append(out, s)
		}
	}
	return out
}

// randomSteps makes n steps over a few tools and arguments, so that calls repeat, some with
// an idempotency key; results in English and Chinese.
func randomSteps(r *rand.Rand, n int) []Step {
	tools := []string{"calculator", "search_restaurant", "book_table", "天气", "send_email"}
	results := []string{"781", "已订好：蜀香园，周五 19:00，4 位。", `{"total": 42.5}`, "sent.", "error: timeout"}
	steps := make([]Step, n)
	for i := range steps {
		tool := tools[r.IntN(len(tools))]
		steps[i] = Step{
			Tool:      tool,
			Arguments: fmt.Sprintf(`{"q":"%d"}`, r.IntN(6)),
			Result:    results[r.IntN(len(results))],
			TurnID:    fmt.Sprintf("t%d", i),
		}
		if tool == "book_table" || tool == "send_email" || r.IntN(7) == 0 {
			steps[i].IdempotencyKey = fmt.Sprintf("k%d", i)
		}
	}
	return steps
}

// TestPickStepsAgreesWithMap: on generated task states, pickSteps chooses exactly what the
// map-based version chose.
func TestPickStepsAgreesWithMap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 500 {
		all := randomSteps(r, r.IntN(60))
		n := r.IntN(15)
		want, got := pickStepsByMap(all, n), pickSteps(all, n, nil)
		if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b Step) bool { return a == b })); diff != "" {
			t.Fatalf("trial %d, %d steps, n=%d (-map +pickSteps):\n%s", trial, len(all), n, diff)
		}
	}
}

// TestNumberShapeKeepsCount: writing every digit as 0 changes no line's token count
// in the encodings where taskLines does it, on generated lines in English and Chinese.
func TestNumberShapeKeepsCount(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	forms := []string{
		"Steps done (%d of %d shown; do not repeat them, reuse their results):",
		` calculator {"expression":"%d*%d+7"} → %d`,
		" 计算器 {\"expression\":\"%d*%d\"} → 结果是 %d。",
		" book_table {\"guests\":%d,\"time\":\"19:%d\"} → 已订好：周五 %d 位。",
		" report %d.%d%% of %d items, id 0%d",
		"- 预订 %d 号桌，%d 人，%d 点",
	}
	for _, enc := range []string{"o200k_base", "cl100k_base"} {
		tok, err := tokenizer.New(enc)
		if err != nil {
			t.Fatal(err)
		}
		if !numbersAreTokens(tok) {
			t.Fatalf("%s: numbersAreTokens false", enc)
		}
		for range 400 {
			nums := make([]any, 3)
			for i := range nums {
				switch r.IntN(3) {
				case 0:
					nums[i] = r.IntN(10)
				case 1:
					nums[i] = r.IntN(1000)
				default:
					nums[i] = r.IntN(10_000_000)
				}
			}
			line := fmt.Sprintf(forms[r.IntN(len(forms))], nums...)
			shaped := string(numberShape(nil, line))
			if a, b := tok.Count(line), tok.Count(shaped); a != b {
				t.Errorf("%s: %q counts %d, its shape %q %d", enc, line, a, shaped, b)
			}
		}
	}
	for _, enc := range []string{"p50k_base", "r50k_base"} {
		tok, err := tokenizer.New(enc)
		if err != nil {
			t.Fatal(err)
		}
		if numbersAreTokens(tok) {
			t.Errorf("%s: numbersAreTokens true; its numbers are not one token each", enc)
		}
	}
}

// renderAndCount is what a turn does with its task state before the model call.
func renderAndCount(lines *taskLines, tok *tokenizer.Tokenizer, st TaskState) int32 {
	block, _ := renderTaskState(st, 12, nil)
	return lines.count(tok, block)
}

// calculatorSteps is a session of n calculator turns, the side-by-side benchmark's shape, its
// numbers of a fixed width so that the text shown does not grow with them.
func calculatorSteps(n int) TaskState {
	var st TaskState
	for i := range n {
		a, b := 100+i%900, 100+(i*7)%900
		st.Done = append(st.Done, Step{Tool: "calculator", Arguments: fmt.Sprintf(`{"expression":"%d*%d"}`, a, b), Result: fmt.Sprintf("%07d", a*b), TurnID: fmt.Sprintf("turn-%04d", i)})
	}
	return st
}

// TestTaskStateCostFlat: rendering and counting the task state allocates no more after 200
// calculator turns than after 25 (the store keeps 200 steps, the context shows 12), and counts
// no line with the tokenizer once the lines' shapes are known.
func TestTaskStateCostFlat(t *testing.T) {
	tok, err := tokenizer.New("o200k_base")
	if err != nil {
		t.Fatal(err)
	}
	perRun := map[int]uint64{}
	for _, n := range []int{25, 200} {
		var lines taskLines
		st := calculatorSteps(n)
		renderAndCount(&lines, tok, st) // the shapes memoized
		const runs = 50
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		for range runs {
			renderAndCount(&lines, tok, st)
		}
		runtime.ReadMemStats(&m1)
		perRun[n] = (m1.TotalAlloc - m0.TotalAlloc) / runs
		// The next turn's new step has a known shape.
		before := len(lines.n)
		renderAndCount(&lines, tok, calculatorSteps(n+1))
		if len(lines.n) != before {
			t.Errorf("%d steps: a new calculator step added %d memoized lines, want 0", n, len(lines.n)-before)
		}
	}
	if perRun[200] > perRun[25]*11/10 {
		t.Errorf("bytes allocated rendering and counting the task state: %d after 200 turns, %d after 25; want within 10%%", perRun[200], perRun[25])
	}
}

// BenchmarkTaskState measures a turn's task-state work after 25 and after 200 turns of one
// session: it must not grow with the session.
func BenchmarkTaskState(b *testing.B) {
	tok, err := tokenizer.New("o200k_base")
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{25, 200} {
		b.Run(fmt.Sprintf("turns=%d", n), func(b *testing.B) {
			var lines taskLines
			st := calculatorSteps(n)
			renderAndCount(&lines, tok, st) // the tokenizer loaded, the lines memoized
			b.ReportAllocs()
			for b.Loop() {
				renderAndCount(&lines, tok, st)
			}
		})
	}
}
