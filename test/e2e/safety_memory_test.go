package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/hermes-agent/hermes/internal/model/scripted"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	"github.com/hermes-agent/hermes/test/hermestest"
)

// TestSafetyFactsReachFoodTurns: an allergy the user stated once reaches every later request it
// can change — food, travel, health — although the request shares no word with it, in either
// language; an unrelated request does not get it.
func TestSafetyFactsReachFoodTurns(t *testing.T) {
	s := startStack(t, hermestest.NoMemories(func(scripted.Request) scripted.Reply { return scripted.Text("（脚本模型）OK") }), stackOptions{embedded: true})
	ctx := context.Background()
	facts := map[string]string{"safety-en": "I'm allergic to peanuts", "safety-zh": "我对花生过敏"}
	for user, fact := range facts {
		if _, err := s.mem.Remember(ctx, &memoryv1.RememberRequest{UserId: user, Type: memoryv1.MemoryType_MEMORY_TYPE_FACT, Content: fact}); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		user, text string
		want       bool
	}{
		{"safety-en", "Order me a pad thai for dinner", true},
		{"safety-en", "Book a flight to Lisbon on Friday", true},
		{"safety-en", "What's 17 plus 25?", false},
		{"safety-zh", "帮我点一份宫保鸡丁外卖", true},
		{"safety-zh", "订一张去成都的机票", true},
		{"safety-zh", "17 加 25 等于几", false},
	}
	for _, c := range cases {
		r := s.run(ctx, s.newSession(c.user), c.user, c.text, nil)
		if r.Completed == nil {
			t.Fatalf("%q: turn failed: %v", c.text, r.Failed)
		}
		got := false
		for _, m := range r.Memories {
			if m.GetContent() == facts[c.user] {
				got = true
				if !strings.Contains(m.GetReason(), "allergy") {
					t.Errorf("%q: reason %q", c.text, m.GetReason())
				}
			}
		}
		if got != c.want {
			t.Errorf("%q: allergy recalled %v, want %v (memories %v)", c.text, got, c.want, r.Memories)
		}
		tokens := 0
		for _, cx := range r.Contexts {
			tokens += int(cx.GetTokens().GetMemory())
		}
		if (tokens > 0) != c.want {
			t.Errorf("%q: %d memory tokens in the context, want the block %v", c.text, tokens, c.want)
		}
	}
}
