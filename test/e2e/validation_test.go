package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/hermes-agent/hermes/internal/model/scripted"
)

const bookSchema = `{
  "type": "object",
  "properties": {
    "restaurant_id": {"type": "string", "pattern": "^R-[0-9]{3}$"},
    "party_size": {"type": "integer", "minimum": 1, "maximum": 20},
    "seating": {"type": "string", "enum": ["indoor", "outdoor"]},
    "time": {"type": "string"}
  },
  "required": ["restaurant_id", "party_size", "seating", "time"],
  "additionalProperties": false
}`

var taskRE = regexp.MustCompile(`task (\d+): book (R-\d{3}) for (\d+) people, (indoor|outdoor), at (\S+)`)

// intent is what the user asked for, which the scripted model reads from the message.
func intent(text string) map[string]any {
	m := taskRE.FindStringSubmatch(text)
	if m == nil {
		return nil
	}
	n, _ := strconv.Atoi(m[3])
	return map[string]any{"restaurant_id": m[2], "party_size": n, "seating": m[4], "time": m[5]}
}

// sloppyModel makes bad first calls on every fifth task — 20%, the article's rate — cycling
// through a missing required argument, a wrong type and a value outside the enum. Given a
// validation result, it re-reads the user's request for exactly the fields the violations
// point at, as a model correcting itself would.
func sloppyModel(req scripted.Request) scripted.Reply {
	want := intent(req.LastUser())
	if want == nil {
		return scripted.Text("?")
	}
	results := req.ToolResults()
	if len(results) == 0 {
		n, _ := strconv.Atoi(taskRE.FindStringSubmatch(req.LastUser())[1])
		args := map[string]any{}
		for k, v := range want {
			args[k] = v
		}
		if n%5 == 0 {
			switch (n / 5) % 3 {
			case 0:
				delete(args, "time")
			case 1:
				args["party_size"] = fmt.Sprintf("%d位", want["party_size"])
			case 2:
				args["seating"] = "inside"
			}
		}
		return scripted.Calls(scripted.Call("book_table", args))
	}
	var env struct {
		Success bool `json:"success"`
		Error   struct {
			Code       string `json:"code"`
			Violations []struct {
				Pointer string `json:"pointer"`
			} `json:"violations"`
		} `json:"error"`
	}
	last := results[len(results)-1]
	if json.Unmarshal([]byte(last.Content), &env) != nil {
		return scripted.Text("I could not read the tool's result.")
	}
	if env.Success {
		return scripted.Text("booked")
	}
	if env.Error.Code != "validation" {
		return scripted.Text("the booking failed: " + env.Error.Code)
	}
	// Correct only what the violations name; keep the rest of the previous call.
	var prev map[string]any
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if c := req.Messages[i].ToolCalls; len(c) > 0 {
			_ = json.Unmarshal([]byte(c[0].Arguments), &prev)
			break
		}
	}
	if prev == nil {
		prev = map[string]any{}
	}
	for _, v := range env.Error.Violations {
		field := strings.TrimPrefix(v.Pointer, "/")
		if val, ok := want[field]; ok {
			prev[field] = val
		}
	}
	return scripted.Calls(scripted.Call("book_table", prev))
}

// TestValidationFeedback runs 50 booking tasks with a model that gets 20% of its first calls
// wrong and measures the tool-call success with and without the validation result fed back.
// Without feedback a task stands or falls with its first call; with it, the model corrects the
// call from the violations in the tool result.
func TestValidationFeedback(t *testing.T) {
	s := startStack(t, sloppyModel, stackOptions{})
	c := &counter{}
	s.registerHTTPTool("book_table", bookSchema, false, c.handler(func(in map[string]any) any {
		return map[string]any{"confirmed": true, "restaurant_id": in["restaurant_id"]}
	}))
	const tasks = 50
	ctx := context.Background()
	var calls, okCalls, firstOK, tasksOK int
	kinds := map[string]int{}
	for i := 1; i <= tasks; i++ {
		sid := s.newSession("u1")
		seating := "indoor"
		if i%2 == 0 {
			seating = "outdoor"
		}
		text := fmt.Sprintf("task %d: book R-%03d for %d people, %s, at 19:%02d", i, i%900+1, i%8+1, seating, i%60)
		res := s.run(ctx, sid, "u1", text, nil)
		for j, r := range res.Results {
			calls++
			if r.GetSuccess() {
				okCalls++
			} else {
				kinds[r.GetErrorCode()]++
			}
			if j == 0 && r.GetSuccess() {
				firstOK++
			}
		}
		if res.Completed != nil && res.Completed.GetText() == "booked" {
			tasksOK++
		}
	}
	without := float64(firstOK) / tasks
	with := float64(tasksOK) / tasks
	callRate := float64(okCalls) / float64(calls)
	report := fmt.Sprintf("tasks %d, first calls invalid %d (%v); tool-call success without feedback %.0f%%, with feedback %.0f%% of tasks (%d of %d calls succeeded, %.0f%%); endpoint ran %d times",
		tasks, tasks-firstOK, kinds, 100*without, 100*with, okCalls, calls, 100*callRate, c.calls.Load())
	t.Log(report)
	if path := os.Getenv("HERMES_E2E_REPORT"); path != "" {
		_ = os.WriteFile(path, []byte(report+"\n"), 0o644)
	}
	if firstOK != 40 || tasksOK != tasks || kinds["validation"] != 10 || c.calls.Load() != tasks {
		t.Errorf("want 40 good first calls, all 50 tasks done after correction, 10 validation failures and 50 bookings run; got %s", report)
	}
}
