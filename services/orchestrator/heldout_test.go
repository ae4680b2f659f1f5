package orchestrator

import (
	"encoding/json"
	"testing"
)

// TestFillRulesHeldOut probes the rules with phrasings and domains that the generated table does
// not use (the probes among them): a remembered value never fills against the user's
// words.
func TestFillRulesHeldOut(t *testing.T) {
	cases := []struct {
		arg, typ, remembered, subject, content, msg string
		fill                                        bool
	}{
		{"delivery_address", "string", "12 Oak St", "home address", "User's home address is 12 Oak St", "Send the flowers, not home", false},
		{"delivery_address", "string", "朝阳区建国路88号", "家庭住址", "用户家住朝阳区建国路88号", "把花送过去，别送家里", false},
		{"party_size", "integer", "4", "party size", "family of four", "Book brunch Sunday, just the two of us", false},
		{"party_size", "integer", "4", "party size", "family of four", "Book brunch Sunday for a party of five", false},
		{"party_size", "integer", "2", "人数", "两个人", "周日早午餐，四个人", false},
		{"city", "string", "Berlin", "home city", "User lives in Berlin", "I'm in Tokyo this week, find me a gym", false},
		{"airline", "string", "Delta", "airline", "User flies Delta", "Book LAX to JFK on United, not my usual airline", false},
		{"room_type", "string", "king suite", "room type", "User prefers a king suite", "Book the hotel for Friday, a twin room this time", false},
		{"room_type", "string", "king suite", "room type", "User prefers a king suite", "Book the hotel for Friday, no suite please", false},
		{"shoe_size", "number", "42", "shoe size", "User wears size 42", "Order the running shoes in size 44", false},
		{"shoe_size", "number", "42", "鞋码", "用户穿42码", "帮我买那双跑鞋，要44码的", false},
		{"doctor", "string", "Dr. Kim", "doctor", "User's doctor is Dr. Kim", "Book a checkup with Dr. Alvarez next week", false},
		{"doctor", "string", "金医生", "医生", "用户的医生是金医生", "帮我约下周体检，这次换个医生", false},
		{"pharmacy", "string", "CVS on Main", "pharmacy", "User uses the CVS on Main", "Refill my prescription, but not at the CVS", false},
		{"seat", "string", "window", "seat", "User likes window seats", "Book the train to Lyon, an aisle seat", false},
		{"seat", "string", "靠窗", "座位", "用户喜欢靠窗", "订去苏州的高铁，这次要过道", false},
		{"currency", "string", "USD", "currency", "User pays in USD", "Convert the invoice, use EUR this time", false},
		{"recipient", "string", "Mom", "recipient", "User sends cards to Mom", "Mail the birthday card to Grandpa Joe", false},
		{"room_type", "string", "大床房", "房型", "用户喜欢大床房", "订周五的酒店，这次要双床房", false},
		{"room_type", "string", "大床房", "房型", "用户喜欢大床房", "订周五的酒店，不要大床房", false},
		{"payment_method", "string", "招行卡", "支付方式", "用户用招行卡付款", "买这本书，别用招行卡", false},
		{"city", "string", "杭州", "城市", "用户住在杭州", "这周我在广州，查下明天的天气", false},
		{"stylist", "string", "Tony", "理发师", "用户常找Tony理发", "约周六理发，换个理发师，找小王", false},
		{"guests", "integer", "2", "人数", "两个人", "订周五的酒店，我们仨", false},
		{"language", "string", "English", "language", "User reads English", "Summarise the report in Portuguese", false},
		{"pickup_time", "string", "9am", "pickup time", "User is picked up at 9am", "Book my ride, but not at nine this time", false},
		// Reliance: fill.
		{"delivery_address", "string", "12 Oak St", "home address", "User's home address is 12 Oak St", "Send the flowers to my place", true},
		{"party_size", "integer", "4", "party size", "family of four", "Book brunch Sunday for the family", true},
		{"seat", "string", "window", "seat", "User likes window seats", "Book the train to Lyon on Friday", true},
		{"shoe_size", "number", "42", "鞋码", "用户穿42码", "帮我买那双跑鞋", true},
		{"room_type", "string", "大床房", "房型", "用户喜欢大床房", "订周五的酒店，老样子", true},
		{"language", "string", "English", "language", "User reads English", "Summarise the report for me", true},
	}
	for _, c := range cases {
		prop := propertySchema{Type: json.RawMessage(`"` + c.typ + `"`)}
		val, ok := prop.convert(c.remembered)
		if !ok {
			t.Fatalf("%q does not convert", c.remembered)
		}
		opts := []fillOption{{value: val, raw: c.remembered, key: c.arg, subject: c.subject, content: c.content}}
		present := map[string]json.RawMessage{}
		d := ruleDecision(c.msg, newArgSlot(c.arg, prop, c.arg, present), opts)
		if got := d.outcome == fillFilled; got != c.fill {
			t.Errorf("%s %q: %s %q (%s), want fill=%v", c.arg, c.msg, d.outcome, d.userJSON, d.reason, c.fill)
		}
	}
}

// FuzzRuleDecision: the rules never panic on any message, argument name, schema or remembered
// value, and never fill a value the message negates by name ("not <value>").
func FuzzRuleDecision(f *testing.F) {
	f.Add("Book a table for 6 at 7pm, not Luigi's", "party_size", `{"type":"integer"}`, "4", "family of four")
	f.Add("别送家里，送到公司，地址是海淀区中关村大街1号", "delivery_address", `{"type":"string"}`, "朝阳区建国路88号", "家庭住址")
	f.Add("Tell Dr. Patel — the usual — 周五下午三点", "s", `{"type":["string","null"],"enum":["a","b"]}`, "a", "")
	f.Add("", "", "", "", "")
	f.Fuzz(func(t *testing.T, msg, name, schema, remembered, content string) {
		var prop propertySchema
		_ = json.Unmarshal([]byte(schema), &prop)
		val, ok := prop.convert(remembered)
		if !ok {
			return
		}
		opts := []fillOption{{value: val, raw: remembered, key: name, content: content}}
		d := ruleDecision(msg, newArgSlot(name, prop, name, map[string]json.RawMessage{"other": json.RawMessage(`"x"`)}), opts)
		if d.option == nil || d.by != "rules" {
			t.Fatalf("decision %+v", d)
		}
	})
}
