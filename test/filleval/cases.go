// Package filleval generates the explicit-beats-memory evaluation: turns in which a value was
// remembered in an earlier session and the user's new message overrides it with a value, turns
// it down without one, relies on it without saying so, or asks for something unrelated — in
// English and Chinese, over nine kinds of argument, phrased from templates and word lists. Both
// the rule tests of the orchestrator and the end-to-end evaluation through RunTurn read it.
package filleval

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Kinds of case.
const (
	Override  = "override"  // the user gives another value
	Negation  = "negation"  // the user turns the remembered value down, gives none
	Implicit  = "implicit"  // the user relies on the remembered value without naming it
	Unrelated = "unrelated" // the turn has nothing to do with the memory
)

// Case is one turn of the evaluation.
type Case struct {
	ID     string
	Domain string
	Lang   string
	Kind   string
	// Message is the user's message.
	Message string
	// Tool is the tool the model calls; Schema its input schema; Slot the argument the memory
	// holds; Others the arguments the model always passes.
	Tool   string
	Schema string
	Slot   string
	Others map[string]any
	// Memory is remembered before the turn: its content, subject, and the value stored under
	// the attribute Slot.
	MemoryContent string
	MemorySubject string
	MemoryValue   string
	// Remembered is MemoryValue typed to the schema (JSON); Want the value the tool should run
	// with (JSON): the user's for Override, the remembered one for Implicit, none otherwise.
	Remembered string
	Want       string
	// UserValue is the value as the user wrote it (Override only).
	UserValue string
}

// PassedArgs are the arguments a model that passes what the user says puts in its call: the
// others, and the user's value when the message gives one.
func (c Case) PassedArgs() map[string]any {
	args := map[string]any{}
	for k, v := range c.Others {
		args[k] = v
	}
	if c.Kind == Override {
		var v any
		_ = json.Unmarshal([]byte(c.Want), &v)
		args[c.Slot] = v
	}
	return args
}

// OmittedArgs are the arguments of a model that leaves the remembered argument out.
func (c Case) OmittedArgs() map[string]any {
	args := map[string]any{}
	for k, v := range c.Others {
		args[k] = v
	}
	return args
}

type value struct {
	text string // as written in the message
	json string // typed to the schema
}

type lang struct {
	content, subject, value string
	overrides               []value
	override                []string // templates with {v}
	negation                []string
	implicit                []string
	unrelated               []string
}

type domain struct {
	name, tool, slot, slotType string
	others                     map[string]map[string]any // by language
	langs                      map[string]lang
}

func schemaOf(d domain) string {
	props := map[string]any{d.slot: map[string]any{"type": d.slotType}}
	req := []string{d.slot}
	for k := range d.others["en"] {
		props[k] = map[string]any{"type": "string"}
		req = append(req, k)
	}
	b, _ := json.Marshal(map[string]any{"type": "object", "properties": props, "required": req})
	return string(b)
}

func str(s string) string { b, _ := json.Marshal(s); return string(b) }

// Cases returns the generated table.
func Cases() []Case {
	var out []Case
	for _, d := range domains() {
		for _, ln := range []string{"en", "zh"} {
			l := d.langs[ln]
			remembered := str(l.value)
			if d.slotType == "integer" {
				remembered = l.value
			}
			base := Case{Domain: d.name, Lang: ln, Tool: d.tool, Schema: schemaOf(d), Slot: d.slot, Others: d.others[ln],
				MemoryContent: l.content, MemorySubject: l.subject, MemoryValue: l.value, Remembered: remembered}
			add := func(kind, msg, want, user string) {
				c := base
				c.Kind, c.Message, c.Want, c.UserValue = kind, msg, want, user
				c.ID = fmt.Sprintf("%s/%s/%s/%d", d.name, ln, kind, len(out))
				out = append(out, c)
			}
			for i, t := range l.override {
				for j, v := range l.overrides {
					if (i+j)%2 == 1 && len(l.overrides) > 2 {
						continue // a spread of template × value pairs, not all of them
					}
					add(Override, strings.ReplaceAll(t, "{v}", v.text), v.json, v.text)
				}
			}
			for _, t := range l.negation {
				add(Negation, t, "", "")
			}
			for _, t := range l.implicit {
				add(Implicit, t, remembered, "")
			}
			for _, t := range l.unrelated {
				add(Unrelated, t, "", "")
			}
		}
	}
	return out
}

func domains() []domain {
	return []domain{
		{name: "delivery-address", tool: "place_order", slot: "delivery_address", slotType: "string",
			others: map[string]map[string]any{"en": {"item": "a large pepperoni pizza"}, "zh": {"item": "一份宫保鸡丁"}},
			langs: map[string]lang{
				"en": {content: "The user's home address is 12 Oak Street, Springfield", subject: "home address", value: "12 Oak Street, Springfield",
					overrides: []value{{"48 Market Avenue", str("48 Market Avenue")}, {"200 Pine Road", str("200 Pine Road")}, {"77 Harbor Street, Apt 4", str("77 Harbor Street")}},
					override:  []string{"Order a large pepperoni pizza and deliver it to {v}", "Get me a large pepperoni pizza, this time send it to {v}", "I want a large pepperoni pizza delivered to my office at {v} please"},
					negation:  []string{"Order a large pepperoni pizza but don't send it to my home address", "A large pepperoni pizza please, not to my house this time", "Get a large pepperoni pizza — I'm not at home today, so not there"},
					implicit:  []string{"Order me a large pepperoni pizza", "Can you get a large pepperoni pizza sent over to my place?", "Large pepperoni pizza to the usual address please"},
					unrelated: []string{"What's 18% of 240?", "How much is 1299 divided by 7?"}},
				"zh": {content: "用户的家庭住址是朝阳区建国路88号", subject: "家庭住址", value: "朝阳区建国路88号",
					overrides: []value{{"海淀区中关村大街1号", str("海淀区中关村大街1号")}, {"望京SOHO塔3", str("望京SOHO塔3")}},
					override:  []string{"点一份宫保鸡丁，送到公司，不是家里，公司地址是{v}", "帮我点一份宫保鸡丁，这次送到{v}", "一份宫保鸡丁，地址改成{v}"},
					negation:  []string{"点一份宫保鸡丁，别送家里", "帮我点一份宫保鸡丁，今天不在家，不要送到家里", "一份宫保鸡丁，不送家里了"},
					implicit:  []string{"帮我点一份宫保鸡丁", "点一份宫保鸡丁送到家里", "老样子，一份宫保鸡丁送到我家"},
					unrelated: []string{"帮我算一下 35 乘以 12", "360 除以 8 等于多少？"}},
			}},
		{name: "party-size", tool: "book_table", slot: "party_size", slotType: "integer",
			others: map[string]map[string]any{"en": {"time": "7pm tomorrow"}, "zh": {"time": "明晚7点"}},
			langs: map[string]lang{
				"en": {content: "The user usually dines with their family of 4", subject: "party size", value: "4",
					overrides: []value{{"6 people", "6"}, {"two", "2"}, {"a party of eight", "8"}},
					override:  []string{"Book a table for {v} at 7pm tomorrow", "Reserve 7pm tomorrow, this time for {v}", "Table at 7pm tomorrow please — we'll be {v}"},
					negation:  []string{"Book a table at 7pm tomorrow, but not for the usual number of people", "Reserve 7pm tomorrow; it won't be the family of four this time", "Table at 7pm tomorrow — not the usual headcount, I'll confirm how many later"},
					implicit:  []string{"Book a table at 7pm tomorrow", "Reserve a table at 7pm tomorrow for the family", "Get us a table at 7pm tomorrow, same as usual"},
					unrelated: []string{"What is 45 times 12?", "Compute 2 to the power of 10"}},
				"zh": {content: "用户一家四口，通常4个人吃饭", subject: "用餐人数", value: "4",
					overrides: []value{{"6个人", "6"}, {"三位", "3"}, {"两个人", "2"}},
					override:  []string{"帮我订明晚7点的位子，{v}", "明晚7点，这次{v}，帮我订个位", "订明晚7点的桌，我们{v}"},
					negation:  []string{"订明晚7点的位子，不是全家一起去", "明晚7点订个位，人数不是平时那样", "帮我订明晚7点，这次不是四个人，具体几个人我再说"},
					implicit:  []string{"帮我订明晚7点的位子", "明晚7点订个位，全家一起去", "老规矩，订明晚7点的桌"},
					unrelated: []string{"算一下 128 加 256", "99 乘以 99 是多少"}},
			}},
		{name: "airline", tool: "book_flight", slot: "airline", slotType: "string",
			others: map[string]map[string]any{"en": {"route": "Boston to Chicago on Friday"}, "zh": {"route": "周五北京飞上海"}},
			langs: map[string]lang{
				"en": {content: "The user always flies Delta", subject: "airline", value: "Delta",
					overrides: []value{{"United", str("United")}, {"JetBlue", str("JetBlue")}, {"American Airlines", str("American Airlines")}},
					override:  []string{"Book Boston to Chicago on Friday on {v}, not my usual airline", "Get me a flight Boston to Chicago on Friday with {v}", "Boston to Chicago on Friday — fly {v} this time"},
					negation:  []string{"Book Boston to Chicago on Friday, but not Delta", "Flight Boston to Chicago on Friday, avoid my usual airline", "Boston to Chicago on Friday; I don't want to fly my usual carrier"},
					implicit:  []string{"Book me a flight Boston to Chicago on Friday", "Boston to Chicago on Friday, the usual airline", "Find a flight Boston to Chicago on Friday please"},
					unrelated: []string{"What's 72 divided by 9?", "Add 17 and 26 for me"}},
				"zh": {content: "用户一直坐国航", subject: "航空公司", value: "国航",
					overrides: []value{{"东航", str("东航")}, {"南航", str("南航")}, {"海南航空", str("海南航空")}},
					override:  []string{"订周五北京飞上海的机票，坐{v}", "周五北京飞上海，这次选{v}", "帮我订周五北京飞上海，换成{v}"},
					negation:  []string{"订周五北京飞上海，不要国航", "周五北京飞上海的机票，别订平时那家航空公司", "周五北京飞上海，这次不坐国航了"},
					implicit:  []string{"帮我订周五北京飞上海的机票", "周五北京飞上海，还是老样子", "订一张周五北京飞上海的票"},
					unrelated: []string{"45 加 78 等于几", "帮我算 1000 减 387"}},
			}},
		{name: "city", tool: "get_forecast", slot: "city", slotType: "string",
			others: map[string]map[string]any{"en": {"day": "tomorrow"}, "zh": {"day": "明天"}},
			langs: map[string]lang{
				"en": {content: "The user lives in Seattle", subject: "home city", value: "Seattle",
					overrides: []value{{"Tokyo", str("Tokyo")}, {"Denver", str("Denver")}, {"San Diego", str("San Diego")}},
					override:  []string{"I'm in {v} this week, what's the weather tomorrow?", "Forecast for tomorrow in {v} please", "Will it rain tomorrow? I'm visiting {v}"},
					negation:  []string{"What's the weather tomorrow? I'm not in Seattle right now", "Tomorrow's forecast, but not for my home city", "Weather tomorrow please — I'm away from home, so not where I live"},
					implicit:  []string{"What's the weather tomorrow?", "Do I need an umbrella tomorrow?", "Forecast for tomorrow at home please"},
					unrelated: []string{"What's 3.5 times 4?", "Divide 81 by 3"}},
				"zh": {content: "用户住在杭州", subject: "所在城市", value: "杭州",
					overrides: []value{{"成都", str("成都")}, {"深圳", str("深圳")}, {"西安", str("西安")}},
					override:  []string{"这周我在{v}，明天天气怎么样", "明天{v}的天气", "我明天去{v}，会下雨吗"},
					negation:  []string{"明天天气怎么样？我现在不在杭州", "查一下明天的天气，不是我家那边", "明天的天气，别查杭州"},
					implicit:  []string{"明天天气怎么样", "明天要带伞吗", "帮我看看明天家里那边的天气"},
					unrelated: []string{"12 乘以 12 是多少", "帮我算 81 除以 9"}},
			}},
		{name: "diet", tool: "order_meal", slot: "dietary_restrictions", slotType: "string",
			others: map[string]map[string]any{"en": {"meal": "lunch for the team"}, "zh": {"meal": "明天的午饭"}},
			langs: map[string]lang{
				"en": {content: "The user is vegetarian", subject: "diet", value: "vegetarian",
					overrides: []value{{"vegan", str("vegan")}, {"halal", str("halal")}, {"gluten-free", str("gluten-free")}},
					override:  []string{"Order lunch for the team, make it {v}", "Lunch for the team please, this time {v}", "Get lunch for the team — everything {v}"},
					negation:  []string{"Order lunch for the team, no dietary restrictions this time", "Lunch for the team please, it doesn't need to be vegetarian", "Get lunch for the team; ignore my usual diet, not vegetarian today"},
					implicit:  []string{"Order lunch for the team", "Get lunch for the team sorted please", "Lunch for the team, you know my diet"},
					unrelated: []string{"What's 250 minus 75?", "Multiply 13 by 17"}},
				"zh": {content: "用户吃素", subject: "饮食", value: "素食",
					overrides: []value{{"清真", str("清真")}, {"无麸质", str("无麸质")}, {"低盐", str("低盐")}},
					override:  []string{"订明天的午饭，要{v}的", "明天的午饭，这次{v}", "帮我订明天的午饭，改成{v}"},
					negation:  []string{"订明天的午饭，这次不用素食", "明天的午饭，不要按我平时的忌口", "订明天的午饭，不吃素了"},
					implicit:  []string{"帮我订明天的午饭", "订明天的午饭，照旧", "明天的午饭帮我安排一下"},
					unrelated: []string{"88 减 29 等于多少", "7 的 3 次方是多少"}},
			}},
		{name: "payment", tool: "checkout", slot: "payment_method", slotType: "string",
			others: map[string]map[string]any{"en": {"cart": "the items in my cart"}, "zh": {"cart": "购物车里的东西"}},
			langs: map[string]lang{
				"en": {content: "The user pays with their Visa card", subject: "payment method", value: "Visa card",
					overrides: []value{{"PayPal", str("PayPal")}, {"cash", str("cash")}, {"Apple Pay", str("Apple Pay")}},
					override:  []string{"Check out the items in my cart and pay with {v}", "Buy the items in my cart, use {v} this time", "Pay for the items in my cart using {v}"},
					negation:  []string{"Check out the items in my cart, but don't use my Visa", "Buy the items in my cart — not with my usual card", "Pay for the items in my cart, not the Visa card this time"},
					implicit:  []string{"Check out the items in my cart", "Buy the items in my cart now", "Pay for the items in my cart the usual way"},
					unrelated: []string{"What's 19.99 times 3?", "Sum 45, 12 and 8"}},
				"zh": {content: "用户习惯用支付宝付款", subject: "支付方式", value: "支付宝",
					overrides: []value{{"微信", str("微信")}, {"现金", str("现金")}, {"信用卡", str("信用卡")}},
					override:  []string{"把购物车里的东西结账，用{v}付", "购物车里的东西买了，这次用{v}", "结算购物车里的东西，换成{v}支付"},
					negation:  []string{"把购物车里的东西结账，别用支付宝", "购物车里的东西买了，不用支付宝", "结算购物车里的东西，这次不用平时的支付方式"},
					implicit:  []string{"把购物车里的东西结账", "购物车里的东西帮我买了", "结算购物车里的东西，老样子付款"},
					unrelated: []string{"19.9 乘以 3 等于几", "帮我算 500 减 123"}},
			}},
		{name: "reply-language", tool: "draft_reply", slot: "language", slotType: "string",
			others: map[string]map[string]any{"en": {"to": "the landlord's email"}, "zh": {"to": "房东的邮件"}},
			langs: map[string]lang{
				"en": {content: "The user wants replies written in English", subject: "reply language", value: "English",
					overrides: []value{{"French", str("French")}, {"Spanish", str("Spanish")}, {"German", str("German")}},
					override:  []string{"Draft a reply to the landlord's email in {v}", "Answer the landlord's email, write it in {v} this time", "Reply to the landlord's email — {v} please"},
					negation:  []string{"Draft a reply to the landlord's email, not in English", "Answer the landlord's email but don't write it in my usual language", "Reply to the landlord's email; English won't work for him"},
					implicit:  []string{"Draft a reply to the landlord's email", "Write back to the landlord's email for me", "Reply to the landlord's email as usual"},
					unrelated: []string{"What's 64 squared?", "How much is 15 plus 27?"}},
				"zh": {content: "用户希望用中文回复", subject: "回复语言", value: "中文",
					overrides: []value{{"日语", str("日语")}, {"英文", str("英文")}, {"法语", str("法语")}},
					override:  []string{"帮我回复房东的邮件，用{v}写", "回房东的邮件，这次用{v}", "房东的邮件帮我回一下，改成{v}"},
					negation:  []string{"帮我回复房东的邮件，别用中文", "回房东的邮件，不要用中文写", "房东的邮件帮我回一下，他看不懂中文，不用中文"},
					implicit:  []string{"帮我回复房东的邮件", "回一下房东的邮件", "房东的邮件照常回复"},
					unrelated: []string{"64 的平方是多少", "15 加 27 等于几"}},
			}},
		{name: "pickup-time", tool: "schedule_pickup", slot: "time", slotType: "string",
			others: map[string]map[string]any{"en": {"what": "the laundry"}, "zh": {"what": "洗好的衣服"}},
			langs: map[string]lang{
				"en": {content: "The user prefers pickups on Saturday at 10am", subject: "pickup time", value: "Saturday 10am",
					overrides: []value{{"Friday at 3pm", str("Friday at 3pm")}, {"tomorrow morning", str("tomorrow morning")}, {"Monday at noon", str("Monday at noon")}},
					override:  []string{"Schedule a pickup of the laundry for {v}", "Pick up the laundry {v} please", "Arrange the laundry pickup, {v} this time"},
					negation:  []string{"Schedule a pickup of the laundry, but not on Saturday", "Pick up the laundry, just not at the usual time", "Arrange the laundry pickup; Saturday 10am doesn't work this week"},
					implicit:  []string{"Schedule a pickup of the laundry", "Arrange the laundry pickup at my usual time", "Please get the laundry picked up"},
					unrelated: []string{"What's 1024 divided by 16?", "Calculate 33 times 3"}},
				"zh": {content: "用户习惯周六上午10点取件", subject: "取件时间", value: "周六上午10点",
					overrides: []value{{"周五下午三点", str("周五下午三点")}, {"明天早上", str("明天早上")}, {"周日晚上8点", str("周日晚上8点")}},
					override:  []string{"帮我预约取洗好的衣服，时间{v}", "洗好的衣服{v}来取", "预约取洗好的衣服，这次改到{v}"},
					negation:  []string{"帮我预约取洗好的衣服，别约周六", "洗好的衣服来取一下，不要平时那个时间", "预约取洗好的衣服，周六上午10点不行"},
					implicit:  []string{"帮我预约取洗好的衣服", "洗好的衣服按老时间来取", "预约一下取洗好的衣服"},
					unrelated: []string{"1024 除以 16 是多少", "33 乘 3 等于几"}},
			}},
		{name: "contact-person", tool: "notify_contact", slot: "contact_name", slotType: "string",
			others: map[string]map[string]any{"en": {"message": "the delivery is delayed"}, "zh": {"message": "快递延迟了"}},
			langs: map[string]lang{
				"en": {content: "The user's emergency contact is Alice Chen", subject: "contact person", value: "Alice Chen",
					overrides: []value{{"Bob Smith", str("Bob Smith")}, {"Maria Lopez", str("Maria Lopez")}, {"Dr. Patel", str("Dr. Patel")}},
					override:  []string{"Tell {v} that the delivery is delayed", "Notify {v}: the delivery is delayed", "Let {v} know the delivery is delayed, not my usual contact"},
					negation:  []string{"Let someone know the delivery is delayed, but not Alice", "Send a note that the delivery is delayed — don't contact my usual person", "Notify a contact that the delivery is delayed, not Alice Chen this time"},
					implicit:  []string{"Notify my contact that the delivery is delayed", "Let them know the delivery is delayed", "Tell my usual contact the delivery is delayed"},
					unrelated: []string{"What's 7 times 8?", "Work out 150 divided by 6"}},
				"zh": {content: "用户的紧急联系人是王伟", subject: "联系人", value: "王伟",
					overrides: []value{{"李娜", str("李娜")}, {"张强", str("张强")}, {"陈医生", str("陈医生")}},
					override:  []string{"告诉{v}快递延迟了", "通知{v}：快递延迟了", "联系{v}，说快递延迟了"},
					negation:  []string{"通知一下快递延迟了，别找王伟", "告诉联系人快递延迟了，不要联系王伟", "快递延迟了，这次不通知平时那个联系人"},
					implicit:  []string{"通知我的联系人快递延迟了", "告诉联系人快递延迟了", "跟平时一样，通知一下快递延迟了"},
					unrelated: []string{"7 乘以 8 等于多少", "150 除以 6 是多少"}},
			}},
	}
}

// SameValue reports whether a value an argument ran with (JSON) is the one wanted: equal JSON,
// or a string that contains the wanted string ("微信支付" for "微信", any case).
func SameValue(got json.RawMessage, want string) bool {
	if string(got) == want {
		return true
	}
	var g, w string
	if json.Unmarshal(got, &g) != nil || json.Unmarshal([]byte(want), &w) != nil || w == "" {
		return false
	}
	return strings.Contains(strings.ToLower(g), strings.ToLower(w))
}
