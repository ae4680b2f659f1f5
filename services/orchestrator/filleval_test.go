package orchestrator

import (
	"encoding/json"
	"fmt"
	"sort"
	"testing"

	"github.com/hermes-agent/hermes/test/filleval"
)

// TestFillRulesGenerated runs the rules alone over the generated evaluation (test/filleval) with
// a model that leaves the remembered argument out: no remembered value may fill against the
// user's words (override and negation cases), and the table of right, held and wrong by kind
// and language is logged.
func TestFillRulesGenerated(t *testing.T) {
	type tally struct{ right, held, wrong int }
	tallies := map[string]*tally{}
	for _, c := range filleval.Cases() {
		if c.Kind == filleval.Unrelated {
			continue
		}
		var schema inputSchema
		if err := json.Unmarshal([]byte(c.Schema), &schema); err != nil {
			t.Fatal(err)
		}
		var prop propertySchema
		_ = json.Unmarshal(schema.Properties[c.Slot], &prop)
		val, ok := prop.convert(c.MemoryValue)
		if !ok {
			t.Fatalf("%s: remembered %q does not convert", c.ID, c.MemoryValue)
		}
		present := map[string]json.RawMessage{}
		for k, v := range c.OmittedArgs() {
			present[k], _ = json.Marshal(v)
		}
		opts := []fillOption{{value: val, raw: c.MemoryValue, memoryID: "m1", key: c.Slot, subject: c.MemorySubject, content: c.MemoryContent}}
		d := ruleDecision(c.Message, newArgSlot(c.Slot, prop, c.Slot, present), opts)
		key := c.Kind + "/" + c.Lang
		if tallies[key] == nil {
			tallies[key] = &tally{}
		}
		tl := tallies[key]
		switch c.Kind {
		case filleval.Override:
			switch {
			case d.outcome == fillFilled:
				tl.wrong++
				t.Errorf("%s %q: filled the remembered value (%s)", c.ID, c.Message, d.reason)
			case filleval.SameValue(d.userJSON, c.Want):
				tl.right++
			default:
				tl.held++
				t.Logf("held without the user's value: %s %q: %s %q %s (%s)", c.ID, c.Message, d.outcome, d.userValue, d.userJSON, d.reason)
			}
		case filleval.Negation:
			if d.outcome == fillFilled {
				tl.wrong++
				t.Errorf("%s %q: filled the remembered value (%s)", c.ID, c.Message, d.reason)
			} else {
				tl.right++
			}
		case filleval.Implicit:
			if d.outcome == fillFilled {
				tl.right++
			} else {
				tl.held++
				t.Logf("implicit held: %s %q: %s (%s)", c.ID, c.Message, d.outcome, d.reason)
			}
		}
	}
	keys := make([]string, 0, len(tallies))
	for k := range tallies {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		tl := tallies[k]
		t.Log(fmt.Sprintf("%-14s right %3d  held %3d  wrong %3d", k, tl.right, tl.held, tl.wrong))
	}
}
