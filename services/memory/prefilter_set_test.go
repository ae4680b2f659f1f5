package memory

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// The extraction set for the pre-filter, generated from templates and word lists in English and
// Chinese: durable statements of many kinds (the user's preferences, habits, identity,
// constraints, allergies, diets, family, home, schedule, corrections of earlier facts, requests
// to remember), in first person and without it, as statements and inside requests; and ordinary
// turns with nothing lasting (calculations, bookings, translations, questions about the world,
// look-ups, small talk). Each template is filled several times from the lists with a fixed seed,
// so the set is the same on every run.

// fill replaces each {name} of a template with a random word of the list of that name.
func fill(r *rand.Rand, tmpl string, words map[string][]string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(tmpl, '{')
		if i < 0 {
			b.WriteString(tmpl)
			return b.String()
		}
		j := strings.IndexByte(tmpl[i:], '}') + i
		b.WriteString(tmpl[:i])
		list := words[tmpl[i+1:j]]
		if len(list) == 0 {
			panic("no word list " + tmpl[i+1:j])
		}
		b.WriteString(list[r.IntN(len(list))])
		tmpl = tmpl[j+1:]
	}
}

var enWords = map[string][]string{
	"allergen": {"peanuts", "shellfish", "penicillin", "cats", "tree nuts", "sesame", "latex", "bee stings", "eggs", "soy", "mustard", "kiwi"},
	"diet":     {"vegetarian", "vegan", "pescatarian", "gluten-free", "kosher", "halal", "keto", "dairy-free"},
	"food":     {"pork", "beef", "red meat", "mushrooms", "coriander", "onions", "garlic", "spicy food", "seafood", "sugar", "fried food", "olives"},
	"thing":    {"jazz", "window seats", "aisle seats", "dark chocolate", "Italian food", "early flights", "quiet hotels", "green tea", "sci-fi novels", "hiking", "board games", "oat milk"},
	"thing2":   {"pop music", "middle seats", "milk chocolate", "fast food", "late flights", "crowded bars", "coffee", "romance novels", "running", "video games", "soy milk"},
	"activity": {"go running", "swim", "work from home", "visit my parents", "do yoga", "cook at home", "take the train to work", "play tennis", "go to church", "walk the dog"},
	"day":      {"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"},
	"days":     {"Mondays", "Tuesdays", "Wednesdays", "Thursdays", "Fridays", "weekends", "weekdays"},
	"time":     {"7am", "8:30", "9 o'clock", "noon", "6pm", "10pm", "half past five"},
	"name":     {"Priya", "Tom Becker", "Aiko", "Mateo", "Sam", "Olivia Chen", "Kwame", "Lena"},
	"job":      {"nurse", "software engineer", "teacher", "lawyer", "student", "chef", "pilot", "accountant", "farmer", "graphic designer"},
	"org":      {"a hospital", "a bank", "a startup", "the city council", "a law firm", "a bakery", "the university"},
	"age":      {"29", "34", "41", "57", "twenty-two", "sixty"},
	"rel":      {"wife", "husband", "son", "daughter", "mother", "father", "partner", "brother", "sister", "grandmother"},
	"pet":      {"dog", "cat", "parrot", "rabbit", "puppy"},
	"n":        {"two", "three", "four", "five", "2", "3", "4"},
	"city":     {"Berlin", "Osaka", "Lisbon", "Denver", "Nairobi", "Lima", "Toronto", "Melbourne", "Leeds", "Austin"},
	"city2":    {"Madrid", "Kyoto", "Porto", "Boulder", "Mombasa", "Cusco", "Ottawa", "Sydney", "York", "Dallas"},
	"addr":     {"14 Elm Street", "221B Baker Street", "9 Rue de Rivoli", "88 Harbour Road", "5 Mill Lane"},
	"lang":     {"Spanish", "French", "German", "Japanese", "Portuguese", "Chinese", "English"},
	"airline":  {"Delta", "United", "Lufthansa", "Emirates", "Ryanair", "Air Canada"},
	"need":     {"a wheelchair-accessible room", "a ground-floor room", "step-free access", "a quiet room", "large print", "a hearing loop"},
	"cond":     {"diabetic", "asthmatic", "pregnant", "epileptic", "colour blind", "hard of hearing"},
	"style":    {"short answers", "bullet points", "metric units", "a formal tone", "British spelling", "24-hour times"},
	"pay":      {"my Visa card", "PayPal", "the Amex ending 4412", "my company card", "Apple Pay"},
	"budget":   {"100", "150 euros", "200 dollars", "80 pounds"},
	"dish":     {"margherita pizza", "pad thai", "chicken burrito", "caesar salad", "ramen", "club sandwich"},
	"rest":     {"Luigi's", "the Blue Lotus", "Chez Marie", "Sakura House", "The Oak Room"},
	"country":  {"France", "Peru", "Kenya", "Canada", "Japan", "Norway", "Chile", "Egypt"},
	"book":     {"Hamlet", "Don Quixote", "War and Peace", "Pride and Prejudice", "The Odyssey"},
	"phrase":   {"good morning", "where is the station", "thank you very much", "see you soon", "how much is this", "the bill, please"},
	"num":      {"12", "7", "48", "365", "1,250", "3.5", "19"},
	"unit":     {"miles", "kilograms", "litres", "feet", "ounces", "degrees Celsius"},
	"unit2":    {"kilometres", "pounds", "gallons", "metres", "grams", "degrees Fahrenheit"},
	"task":     {"buy milk", "send the invoice", "water the plants", "pay the electricity bill", "back up the laptop", "renew the parking permit"},
	"topic":    {"photosynthesis", "inflation", "black holes", "the French revolution", "compound interest", "machine learning"},
	"genre":    {"jazz", "classical music", "lo-fi beats", "the news", "a podcast about history"},
	"item":     {"this paragraph", "the article above", "this email", "the meeting notes", "this report"},
	"ord":      {"4471", "55812", "A-2291", "88120"},
	"place":    {"the station", "the museum", "the city centre", "the airport", "the stadium"},
	"greet":    {"Hi", "Hello!", "Good morning", "Hey there", "Thanks!", "Thank you so much", "OK", "Great, thanks", "Sounds good", "Bye", "Perfect", "Cool", "Got it, thanks", "Good night"},
}

var zhWords = map[string][]string{
	"allergen": {"花生", "海鲜", "芒果", "青霉素", "猫毛", "牛奶", "鸡蛋", "花粉", "坚果", "虾"},
	"diet":     {"吃素", "只吃清真", "不吃猪肉", "不吃牛肉", "不吃辣", "戒糖", "不喝酒", "不吃香菜"},
	"food":     {"香菜", "辣椒", "羊肉", "内脏", "洋葱", "大蒜", "肥肉", "甜食", "生鱼片"},
	"thing":    {"川菜", "靠窗的座位", "靠过道的座位", "早班机", "安静的酒店", "绿茶", "科幻小说", "爬山", "桌游", "燕麦奶", "红酒", "火锅"},
	"activity": {"跑步", "游泳", "在家办公", "回父母家", "练瑜伽", "在家做饭", "坐地铁上班", "打羽毛球", "去教堂", "遛狗"},
	"day":      {"周一", "周二", "周三", "周四", "周五", "周六", "周日"},
	"time":     {"七点", "八点半", "九点", "中午十二点", "下午六点", "晚上十点"},
	"name":     {"王芳", "李雷", "陈静", "小林", "张伟", "刘洋", "赵敏"},
	"job":      {"护士", "程序员", "老师", "律师", "学生", "厨师", "飞行员", "会计", "设计师", "医生"},
	"org":      {"一家医院", "银行", "一家创业公司", "市政府", "律师事务所", "大学"},
	"age":      {"29", "34", "四十一", "五十七", "二十二"},
	"rel":      {"老婆", "老公", "儿子", "女儿", "妈妈", "爸爸", "爱人", "哥哥", "妹妹", "奶奶"},
	"pet":      {"狗", "猫", "鹦鹉", "兔子"},
	"n":        {"两", "三", "四", "五", "2", "3", "4"},
	"city":     {"上海", "成都", "西安", "厦门", "青岛", "昆明", "杭州", "深圳", "武汉", "大连"},
	"city2":    {"北京", "重庆", "南京", "广州", "天津", "苏州", "长沙", "沈阳"},
	"addr":     {"朝阳区建国路88号", "徐汇区漕溪北路18号", "天河区体育西路5号", "西湖区文三路100号"},
	"lang":     {"英文", "中文", "日语", "法语", "德语", "西班牙语"},
	"airline":  {"国航", "东航", "南航", "海航", "春秋航空"},
	"need":     {"无障碍房间", "一楼的房间", "安静的房间", "轮椅通道", "大字版菜单"},
	"cond":     {"糖尿病", "高血压", "哮喘", "心脏病", "癫痫"},
	"style":    {"简短的回答", "列表", "公制单位", "正式的语气", "繁体字", "24小时制"},
	"pay":      {"支付宝", "微信支付", "招行信用卡", "公司的卡", "现金"},
	"budget":   {"500", "八百", "一千", "300块"},
	"dish":     {"宫保鸡丁", "麻婆豆腐", "牛肉面", "小笼包", "酸菜鱼", "披萨"},
	"rest":     {"蜀香园", "外婆家", "海底捞", "鼎泰丰", "老北京炸酱面"},
	"country":  {"法国", "秘鲁", "肯尼亚", "加拿大", "日本", "挪威", "埃及"},
	"book":     {"红楼梦", "西游记", "三体", "围城", "活着"},
	"phrase":   {"早上好", "火车站在哪里", "非常感谢", "回头见", "这个多少钱", "买单"},
	"num":      {"12", "7", "48", "365", "1250", "3.5", "19"},
	"unit":     {"英里", "公斤", "升", "英尺", "盎司"},
	"unit2":    {"公里", "磅", "加仑", "米", "克"},
	"task":     {"买牛奶", "交水电费", "给花浇水", "备份电脑", "续办停车证", "发周报"},
	"topic":    {"光合作用", "通货膨胀", "黑洞", "复利", "机器学习", "量子计算"},
	"genre":    {"爵士乐", "古典音乐", "新闻", "相声", "轻音乐"},
	"item":     {"这段话", "上面这篇文章", "这封邮件", "会议纪要", "这份报告"},
	"ord":      {"4471", "55812", "A2291", "88120"},
	"place":    {"火车站", "博物馆", "市中心", "机场", "体育馆"},
	"greet":    {"你好", "您好", "谢谢", "谢谢你", "好的", "好的，谢谢", "嗯嗯", "太好了", "没问题", "再见", "晚安", "早上好", "收到", "明白了"},
}

// template is a template of one kind of turn; durable says whether its turns state a lasting
// fact about the user.
type template struct {
	kind    string
	durable bool
	text    string
}

var enTemplates = []template{
	// Allergies and medical needs.
	{"allergy", true, "I'm allergic to {allergen}"},
	{"allergy", true, "Heads up: my {rel} has a severe allergy to {allergen}"},
	{"allergy", true, "Find a restaurant near {place}, I react badly to {allergen}"},
	{"allergy", true, "Book a table at {rest} for {n}, no {allergen} for my {rel} please"},
	{"allergy", true, "{allergen} make me really ill, so keep them out of any recipe"},
	{"medical", true, "I'm {cond}, so keep that in mind for meal plans"},
	{"medical", true, "My {rel} is {cond}"},
	{"medical", true, "We need {need} wherever we stay"},
	{"medical", true, "Please always ask for {need} when you book hotels"},
	// Diets and foods.
	{"diet", true, "I'm {diet}"},
	{"diet", true, "We eat {diet} at home"},
	{"diet", true, "I don't eat {food}"},
	{"diet", true, "I stopped eating {food} last year"},
	{"diet", true, "Order a {dish} for me, but without {food}, I can't have it"},
	{"diet", true, "No {food} in anything you order for me"},
	{"diet", true, "Strictly {diet}, that goes for every order"},
	// Preferences.
	{"preference", true, "I prefer {thing} to {thing2}"},
	{"preference", true, "I love {thing}"},
	{"preference", true, "{thing} are my favourite"},
	{"preference", true, "I really can't stand {thing2}"},
	{"preference", true, "My go-to is {thing}"},
	{"preference", true, "When you book flights, I like {thing}"},
	{"preference", true, "Always give me {style}"},
	{"preference", true, "From now on use {style}"},
	{"preference", true, "Reply in {lang} from now on"},
	{"preference", true, "Never book me on {airline} again"},
	{"preference", true, "Pay with {pay} by default"},
	{"preference", true, "{style} please, that's how I read best"},
	// Habits and schedule.
	{"habit", true, "I usually {activity} on {days}"},
	{"habit", true, "Every {day} I {activity}"},
	{"habit", true, "I {activity} most mornings"},
	{"habit", true, "On {days} we always {activity}"},
	{"schedule", true, "I work night shifts, so nothing before {time}"},
	{"schedule", true, "I'm busy every {day} afternoon"},
	{"schedule", true, "I'm only free on {days}"},
	{"schedule", true, "My gym class is on {days} at {time}"},
	{"schedule", true, "Don't schedule anything for me before {time}"},
	// Identity.
	{"identity", true, "My name is {name}"},
	{"identity", true, "Call me {name}"},
	{"identity", true, "I'm a {job}"},
	{"identity", true, "I work as a {job} at {org}"},
	{"identity", true, "I'm {age} years old"},
	{"identity", true, "I speak {lang} at home"},
	{"identity", true, "I'm {name}, a {job} from {city}"},
	// Family and pets.
	{"family", true, "I have {n} kids"},
	{"family", true, "My {rel}'s name is {name}"},
	{"family", true, "We're a family of {n}"},
	{"family", true, "We have a {pet} called {name}"},
	{"family", true, "Book a table for {n} at {time}, it's for my {rel}'s birthday"},
	{"family", true, "My {rel} lives with us"},
	// Home and location.
	{"location", true, "I live in {city}"},
	{"location", true, "I moved to {city} last month"},
	{"location", true, "My home address is {addr}"},
	{"location", true, "I'm based in {city} but I travel to {city2} a lot"},
	{"location", true, "Deliver to {addr}, that's my home"},
	{"location", true, "We just moved from {city2} to {city}"},
	// Constraints.
	{"constraint", true, "I can't do anything before {time}"},
	{"constraint", true, "I don't drive"},
	{"constraint", true, "My budget is {budget} a night for hotels"},
	{"constraint", true, "Hotels must be under {budget} a night"},
	{"constraint", true, "I need {need}"},
	// Corrections.
	{"correction", true, "Actually, I live in {city}, not {city2}"},
	{"correction", true, "Sorry, I meant {city}, not {city2}"},
	{"correction", true, "I no longer {activity}"},
	{"correction", true, "Correction: my name is {name}"},
	{"correction", true, "My address changed, it's {addr} now"},
	{"correction", true, "Not {airline} anymore, I switched to another airline"},
	// Requests to remember.
	{"remember", true, "Remember that my {rel} is called {name}"},
	{"remember", true, "Please note my address is {addr}"},
	{"remember", true, "For future reference, I'm {diet}"},
	{"remember", true, "Keep in mind that I {activity} on {days}"},
	{"remember", true, "Remember: {thing}, always"},
	{"remember", true, "Save this: my frequent flyer number is {ord}"},
	// Lasting facts inside requests and without a subject.
	{"mixed", true, "Book a table at {rest} at {time}, we're {diet}"},
	{"mixed", true, "Nothing with {allergen}, ever"},
	{"mixed", true, "Table for {n}, and none of us eat {food}"},
	{"mixed", true, "{thing}, every time"},
	{"mixed", true, "For the kids: no {food}"},
	{"mixed", true, "Find a hotel in {city}, my {rel} uses a wheelchair"},

	// Ordinary turns: nothing lasting.
	{"arithmetic", false, "What is {num}*{num}?"},
	{"arithmetic", false, "Calculate {num} plus {num}"},
	{"arithmetic", false, "{num}*{num}+{num}"},
	{"arithmetic", false, "How much is {num} divided by {num}?"},
	{"arithmetic", false, "What's {num} percent of {num}?"},
	{"booking", false, "Book a table for {n} at {rest} at {time}"},
	{"booking", false, "Reserve a table at {rest} for {day} at {time}"},
	{"booking", false, "Can you book a flight to {city} on {day}?"},
	{"booking", false, "I'd like to book a table for {n} tonight"},
	{"booking", false, "Order a {dish} for delivery"},
	{"booking", false, "Book a taxi to {place} at {time}"},
	{"translation", false, "Translate '{phrase}' into {lang}"},
	{"translation", false, "How do you say '{phrase}' in {lang}?"},
	{"translation", false, "Can you translate {item} into {lang}?"},
	{"facts", false, "What's the capital of {country}?"},
	{"facts", false, "Who wrote {book}?"},
	{"facts", false, "How far is {city} from {city2}?"},
	{"facts", false, "Explain {topic} in simple terms"},
	{"facts", false, "What is {topic}?"},
	{"facts", false, "What's the population of {country}?"},
	{"weather", false, "What's the weather in {city} on {day}?"},
	{"weather", false, "Will it rain in {city} tomorrow?"},
	{"utility", false, "Set a timer for {num} minutes"},
	{"utility", false, "Remind me to {task} at {time}"},
	{"utility", false, "Convert {num} {unit} to {unit2}"},
	{"utility", false, "Summarize {item}"},
	{"utility", false, "Find Italian restaurants near {place}"},
	{"utility", false, "Show me flights from {city} to {city2}"},
	{"utility", false, "Check the status of order {ord}"},
	{"utility", false, "Play some {genre}"},
	{"utility", false, "Could you help me write an email to the landlord?"},
	{"utility", false, "I want to know how {topic} works"},
	{"utility", false, "How can I get to {place} from here?"},
	{"small talk", false, "{greet}"},
	{"small talk", false, "{greet}"},
	{"small talk", false, "{greet}"},
	// Ordinary turns that speak of the user or of times: some reach extraction (the cost).
	{"personal task", false, "Can you check if my package has shipped?"},
	{"personal task", false, "I need a taxi to {place} at {time}"},
	{"personal task", false, "We need a table for {n} at {time}"},
	{"personal task", false, "Add {task} to my to-do list"},
	{"personal task", false, "What's on my calendar on {day}?"},
	{"personal task", false, "What should I cook tonight?"},
	{"personal task", false, "Send the slides to {name} by {day}"},
	{"personal task", false, "Is {rest} open on {days}?"},
	{"personal task", false, "What time is it in {city}?"},
	{"personal task", false, "Tell me a joke"},
	{"personal task", false, "How long does it take to drive to {place}?"},
}

var zhTemplates = []template{
	{"allergy", true, "我对{allergen}过敏"},
	{"allergy", true, "提醒一下，我{rel}对{allergen}过敏"},
	{"allergy", true, "帮我找家餐厅，我吃了{allergen}会起疹子"},
	{"allergy", true, "订{rest}{n}个人，我{rel}碰不得{allergen}"},
	{"medical", true, "我有{cond}"},
	{"medical", true, "我{rel}有{cond}，订餐的时候注意一下"},
	{"medical", true, "住酒店需要{need}"},
	{"diet", true, "我{diet}"},
	{"diet", true, "我们家{diet}"},
	{"diet", true, "点{dish}，别放{food}，我不吃"},
	{"diet", true, "以后点外卖都不要{food}"},
	{"diet", true, "从来不吃{food}"},
	{"preference", true, "我喜欢{thing}"},
	{"preference", true, "我更喜欢{thing}"},
	{"preference", true, "我最爱{thing}"},
	{"preference", true, "受不了{food}的味道"},
	{"preference", true, "订机票的话我要{thing}"},
	{"preference", true, "以后回复都用{lang}"},
	{"preference", true, "回答请用{style}"},
	{"preference", true, "别再给我订{airline}了"},
	{"preference", true, "默认用{pay}付款"},
	{"habit", true, "我一般{day}{activity}"},
	{"habit", true, "每个{day}我都{activity}"},
	{"habit", true, "平时{activity}"},
	{"habit", true, "我们周末通常{activity}"},
	{"schedule", true, "我上夜班，{time}之前别安排事情"},
	{"schedule", true, "每周{day}下午我都没空"},
	{"schedule", true, "我只有{day}有空"},
	{"schedule", true, "{day}{time}有健身课"},
	{"identity", true, "我叫{name}"},
	{"identity", true, "叫我{name}就行"},
	{"identity", true, "我是{job}"},
	{"identity", true, "在{org}当{job}"},
	{"identity", true, "我今年{age}岁"},
	{"family", true, "我有{n}个孩子"},
	{"family", true, "我{rel}叫{name}"},
	{"family", true, "我们家{n}口人"},
	{"family", true, "家里养了一只{pet}"},
	{"family", true, "帮我订{time}的位子，给我{rel}过生日"},
	{"location", true, "我住在{city}"},
	{"location", true, "上个月搬到了{city}"},
	{"location", true, "我家地址是{addr}"},
	{"location", true, "人在{city}，经常去{city2}出差"},
	{"location", true, "送到{addr}，那是我家"},
	{"constraint", true, "我不会开车"},
	{"constraint", true, "酒店一晚预算{budget}以内"},
	{"constraint", true, "{time}以前不能开会"},
	{"constraint", true, "我需要{need}"},
	{"correction", true, "其实我住在{city}，不是{city2}"},
	{"correction", true, "我说错了，是{city}不是{city2}"},
	{"correction", true, "我已经不{activity}了"},
	{"correction", true, "更正一下，我叫{name}"},
	{"correction", true, "地址改了，现在是{addr}"},
	{"remember", true, "记住，我{rel}叫{name}"},
	{"remember", true, "帮我记一下，我的常旅客号是{ord}"},
	{"remember", true, "你记着我{diet}"},
	{"remember", true, "下次订餐记得我{diet}"},
	{"mixed", true, "{food}一口都不能吃"},
	{"mixed", true, "孩子们不吃{food}"},
	{"mixed", true, "订个{day}的位子，老人家腿脚不好"},
	{"mixed", true, "帮我订{city}的酒店，我{rel}坐轮椅"},
	{"mixed", true, "{thing}，每次都是"},

	{"arithmetic", false, "请帮我算一下 {num}*{num}+{num}。"},
	{"arithmetic", false, "{num}乘以{num}等于多少"},
	{"arithmetic", false, "{num}除以{num}是多少？"},
	{"arithmetic", false, "算一下{num}加{num}"},
	{"booking", false, "帮我订{time}{n}个人的位子"},
	{"booking", false, "订一张{day}去{city}的机票"},
	{"booking", false, "我想订{rest}{day}晚上的位子"},
	{"booking", false, "帮我点一份{dish}"},
	{"booking", false, "预约{day}{time}的理发"},
	{"booking", false, "叫一辆车去{place}"},
	{"translation", false, "把“{phrase}”翻译成{lang}"},
	{"translation", false, "“{phrase}”用{lang}怎么说？"},
	{"translation", false, "帮我把{item}翻译成{lang}"},
	{"facts", false, "{country}的首都是哪里？"},
	{"facts", false, "《{book}》的作者是谁"},
	{"facts", false, "{city}离{city2}有多远"},
	{"facts", false, "给我讲讲{topic}"},
	{"facts", false, "{topic}是什么"},
	{"weather", false, "{city}{day}天气怎么样"},
	{"weather", false, "明天{city}会下雨吗"},
	{"utility", false, "设一个{num}分钟的倒计时"},
	{"utility", false, "提醒我{time}{task}"},
	{"utility", false, "把{num}{unit}换算成{unit2}"},
	{"utility", false, "总结一下{item}"},
	{"utility", false, "查一下{city}到{city2}的高铁"},
	{"utility", false, "查一下订单{ord}的状态"},
	{"utility", false, "放点{genre}"},
	{"utility", false, "推荐几家{city}的川菜馆"},
	{"utility", false, "请问去{place}怎么走"},
	{"utility", false, "我想知道{topic}的原理"},
	{"small talk", false, "{greet}"},
	{"small talk", false, "{greet}"},
	{"small talk", false, "{greet}"},
	{"personal task", false, "我的快递到哪了"},
	{"personal task", false, "我明天要去{city}，帮我查下天气"},
	{"personal task", false, "把文件发给{name}"},
	{"personal task", false, "{day}有什么安排"},
	{"personal task", false, "今天星期几"},
	{"personal task", false, "讲个笑话"},
	{"personal task", false, "附近有药店吗"},
	{"personal task", false, "我们{n}个人，帮我订{time}的位子"},
	{"personal task", false, "{rest}{day}营业吗"},
	{"personal task", false, "{city}现在几点"},
}

// personalEvents are first-person accounts of what happened, neither durable facts nor tasks:
// the extraction prompt may keep them as events, so they are reported, not required.
var personalEvents = []template{
	{"event", false, "I had sushi in {city} last week"},
	{"event", false, "We stopped in {city2} on the way back"},
	{"event", false, "My flight connects through {city} tomorrow"},
	{"event", false, "上周在{city}吃了顿火锅"},
	{"event", false, "我上个月去{city}出差了"},
	{"event", false, "下周要在{city2}转机"},
}

// extractionSet generates per times fillings of every template of both languages; duplicates
// are dropped.
func extractionSet(per int) (durable, tasks, events []labelled) {
	r := rand.New(rand.NewPCG(25, 3))
	seen := map[string]bool{}
	gen := func(ts []template, lang string, words map[string][]string, out map[bool]*[]labelled, evOut *[]labelled) {
		for _, t := range ts {
			for range per {
				text := fill(r, t.text, words)
				if seen[text] {
					continue
				}
				seen[text] = true
				c := labelled{text: text, lang: lang, kind: t.kind, durable: t.durable}
				if evOut != nil {
					*evOut = append(*evOut, c)
					continue
				}
				*out[t.durable] = append(*out[t.durable], c)
			}
		}
	}
	out := map[bool]*[]labelled{true: &durable, false: &tasks}
	gen(enTemplates, "en", enWords, out, nil)
	gen(zhTemplates, "zh", zhWords, out, nil)
	var evEN, evZH []template
	for _, t := range personalEvents {
		if strings.IndexFunc(t.text, func(r rune) bool { return r > 0x2E80 }) >= 0 {
			evZH = append(evZH, t)
		} else {
			evEN = append(evEN, t)
		}
	}
	gen(evEN, "en", enWords, nil, &events)
	gen(evZH, "zh", zhWords, nil, &events)
	return durable, tasks, events
}

// setSummary counts a set by language and kind, for the test's log.
func setSummary(cs []labelled) string {
	n := map[string]int{}
	for _, c := range cs {
		n[c.lang]++
	}
	return fmt.Sprintf("%d (en %d, zh %d)", len(cs), n["en"], n["zh"])
}
