#!/usr/bin/env python3
"""Generates retrieval.json, the memory service's retrieval set.

Targets are hand-written: a memory a user stated and a later request of the same user that it
should be recalled for, phrased the way people ask (it rarely repeats the memory's words).
Distractors are generated from templates with a fixed seed, so every user has a realistic
number of unrelated memories; some share a word with a query without being relevant.
No-answer queries have no relevant memory and measure what gets in wrongly.

Run: python3 gen_retrieval.py > retrieval.json
"""
import json
import random

random.seed(20261202)

# (user, type, content, subject, attributes, query, extra relevant content list)
T = [
 # --- zh_li: Chinese, food and daily life
 ("zh_li", "preference", "用户喜欢吃川菜，最常去的川菜馆是蜀香园", "restaurant", {"restaurant_name": "蜀香园", "cuisine": "川菜"}, "我上次提到的那家川菜馆，帮我订个明天晚上7点两个人的位置"),
 ("zh_li", "fact", "用户对花生过敏", "allergy", {"allergen": "花生"}, "帮我点外卖，注意别点会让我过敏的东西"),
 ("zh_li", "preference", "用户喝咖啡只喝燕麦拿铁，不加糖", "coffee", {"drink": "燕麦拿铁"}, "帮我在楼下咖啡店点一杯我常喝的咖啡"),
 ("zh_li", "fact", "用户住在杭州西湖区", "home city", {"city": "杭州"}, "查一下我家那边明天的天气"),
 ("zh_li", "preference", "用户回复风格偏好简洁，不要长篇大论", "reply style", {}, "以后回答我简单点就行"),
 ("zh_li", "fact", "用户的女儿叫小雨，今年六岁", "family", {"daughter_name": "小雨"}, "给我女儿挑个生日礼物，她快过生日了"),
 ("zh_li", "config", "用户希望日程提醒提前30分钟", "reminder", {"reminder_minutes": "30"}, "帮我设一个明天下午开会的日程提醒"),
 ("zh_li", "fact", "用户的车是一辆白色特斯拉Model 3，车牌浙A12345", "car", {"plate": "浙A12345"}, "帮我交一下停车费，车牌你知道的"),
 ("zh_li", "preference", "用户周末喜欢去西湖边跑步", "exercise", {}, "这周末有什么适合跑步的好天气吗"),
 ("zh_li", "event", "用户上周三在蜀香园请同事吃了饭", "restaurant", {"restaurant_name": "蜀香园"}, "上周我请同事吃饭是在哪家店"),
 ("zh_li", "fact", "用户在一家电商公司做产品经理", "job", {"employer_type": "电商公司"}, "帮我写一份产品经理的周报模板"),
 ("zh_li", "preference", "用户不吃香菜", "food dislike", {}, "点一份牛肉面，记得我的忌口"),
 # --- zh_wang: Chinese, work and tech
 ("zh_wang", "fact", "用户在某某平台上的商家ID是M-23891", "merchant", {"merchant_id": "M-23891"}, "查一下我店铺上个月的销售额"),
 ("zh_wang", "config", "用户的代码风格要求使用四个空格缩进", "code style", {"indent": "4 spaces"}, "帮我格式化这段Python代码，按我的缩进习惯"),
 ("zh_wang", "preference", "用户写代码偏好使用Go语言", "programming language", {"language": "Go"}, "写一个简单的HTTP服务示例"),
 ("zh_wang", "fact", "用户的服务器部署在阿里云华东2区", "cloud", {"region": "华东2"}, "帮我看看我们服务器所在区域最近有没有故障公告"),
 ("zh_wang", "preference", "用户出差订酒店喜欢全季酒店", "hotel", {"hotel_brand": "全季"}, "下周去北京出差，帮我订酒店"),
 ("zh_wang", "preference", "用户坐高铁习惯选靠窗座位", "train seat", {"seat": "靠窗"}, "帮我买后天去上海的高铁票"),
 ("zh_wang", "fact", "用户的团队每周一上午十点开周会", "meeting", {"weekday": "周一"}, "这周的周会是什么时候来着"),
 ("zh_wang", "event", "用户昨天提交了季度OKR初稿", "okr", {}, "我的季度OKR进展到哪一步了"),
 ("zh_wang", "fact", "用户的工号是E10086", "employee id", {"employee_id": "E10086"}, "帮我填一下报销单上的工号"),
 ("zh_wang", "preference", "用户开会纪要喜欢用要点列表的格式", "notes format", {}, "把刚才会议的内容整理成纪要"),
 ("zh_wang", "fact", "用户养了一只叫豆豆的柯基", "pet", {"pet_name": "豆豆"}, "附近有没有可以带狗进去的咖啡馆"),
 # --- zh_chen: Chinese, health and travel
 ("zh_chen", "fact", "用户有高血压，每天早上吃降压药", "health", {}, "提醒我明天早上吃药"),
 ("zh_chen", "preference", "用户旅行喜欢去海边城市，比如厦门和三亚", "travel", {}, "国庆想出去玩几天，有什么推荐"),
 ("zh_chen", "preference", "用户晚上十一点前睡觉，不要在这之后发通知", "notifications", {}, "把这条消息安排在合适的时间推送给我"),
 ("zh_chen", "fact", "用户的医保卡在北京办理", "insurance", {"city": "北京"}, "我在外地看病可以用医保吗"),
 ("zh_chen", "preference", "用户喜欢看科幻小说，尤其是刘慈欣的作品", "books", {"author": "刘慈欣"}, "推荐几本适合假期读的书"),
 ("zh_chen", "event", "用户三天前预约了下周二的体检", "checkup", {"date": "下周二"}, "我的体检是哪天来着"),
 ("zh_chen", "preference", "用户听音乐喜欢周杰伦", "music", {"artist": "周杰伦"}, "放点我爱听的歌"),
 ("zh_chen", "fact", "用户的母亲住在成都", "family", {"city": "成都"}, "给我妈寄个快递，地址在她那边"),
 ("zh_chen", "preference", "用户喝茶偏爱西湖龙井", "tea", {"tea": "西湖龙井"}, "给我推荐点好茶叶"),
 ("zh_chen", "habit", "用户每次问天气都会追问明天的情况", "weather", {}, "今天天气怎么样"),
 ("zh_chen", "config", "用户要求所有金额用人民币显示", "currency", {"currency": "CNY"}, "这件衣服在美国官网卖多少钱"),
 # --- en_amy: English
 ("en_amy", "preference", "User prefers short, concise replies without bullet points", "reply style", {}, "Keep your answers brief from now on"),
 ("en_amy", "fact", "User is vegetarian and does not eat fish", "diet", {"diet": "vegetarian"}, "Suggest a dinner recipe for tonight"),
 ("en_amy", "fact", "User lives in Seattle, Washington", "home city", {"city": "Seattle"}, "What's the weather going to be like at home this weekend?"),
 ("en_amy", "preference", "User likes window seats on flights", "flight seat", {"seat": "window"}, "Book me a flight to Denver next Friday"),
 ("en_amy", "fact", "User's manager is called Priya", "work", {"manager": "Priya"}, "Draft an email to my manager asking for Friday off"),
 ("en_amy", "preference", "User's favorite coffee is a flat white with oat milk", "coffee", {"drink": "flat white"}, "Order my usual coffee"),
 ("en_amy", "config", "User wants dates formatted as YYYY-MM-DD", "date format", {"date_format": "YYYY-MM-DD"}, "Write down today's date in my notes"),
 ("en_amy", "event", "User had a dentist appointment on Monday that was rescheduled", "dentist", {}, "When is my dentist appointment now?"),
 ("en_amy", "fact", "User has a cat named Miso", "pet", {"pet_name": "Miso"}, "Remind me to buy food for my cat"),
 ("en_amy", "preference", "User enjoys hiking on weekends in the Cascades", "hobby", {}, "Any good hiking trails for Saturday?"),
 ("en_amy", "fact", "User's passport expires in March 2027", "passport", {"expiry": "2027-03"}, "Do I need to renew any travel documents before my trip?"),
 ("en_amy", "preference", "User dislikes spicy food", "food dislike", {}, "Recommend a Thai restaurant nearby that suits my taste"),
 # --- en_bob: English, engineering
 ("en_bob", "config", "User's default shell is zsh with oh-my-zsh", "shell", {"shell": "zsh"}, "Give me an alias to list files by size in my shell config"),
 ("en_bob", "preference", "User prefers Python type hints in all code examples", "code style", {}, "Write a function that parses a CSV file"),
 ("en_bob", "fact", "User's GitHub username is bobthebuilder42", "github", {"github_user": "bobthebuilder42"}, "List my open pull requests on GitHub"),
 ("en_bob", "fact", "User works in the Pacific time zone", "timezone", {"timezone": "America/Los_Angeles"}, "Schedule a call with the London team at a reasonable hour for me"),
 ("en_bob", "preference", "User prefers PostgreSQL over MySQL for new projects", "database", {"database": "PostgreSQL"}, "Which database should I use for my new side project?"),
 ("en_bob", "event", "User deployed version 2.3 of the billing service yesterday", "deploy", {"version": "2.3"}, "What did I ship to the billing service recently?"),
 ("en_bob", "fact", "User's team uses Jira project key PAY", "jira", {"project_key": "PAY"}, "Create a ticket for the refund bug"),
 ("en_bob", "preference", "User likes to run every morning at 6am", "exercise", {}, "Plan my morning routine for tomorrow"),
 ("en_bob", "fact", "User is allergic to penicillin", "allergy", {"allergen": "penicillin"}, "The doctor prescribed antibiotics, anything I should tell them?"),
 ("en_bob", "preference", "User wants commit messages in the conventional commits style", "commit style", {}, "Write a commit message for this refactor"),
 # --- mix_zoe: mixed Chinese and English
 ("mix_zoe", "preference", "用户喜欢用英文写工作邮件", "email language", {"language": "English"}, "帮我给客户写一封跟进邮件"),
 ("mix_zoe", "fact", "User's office is in Shanghai Jing'an district", "office", {"city": "Shanghai"}, "离我公司近的健身房有哪些"),
 ("mix_zoe", "preference", "用户点奶茶要少糖去冰", "milk tea", {"sugar": "少糖"}, "帮我点一杯奶茶"),
 ("mix_zoe", "fact", "用户的生日是5月20日", "birthday", {"birthday": "05-20"}, "When is my birthday again? 我忘了告诉过你没"),
]

NO_ANSWER = [
 ("zh_li", "帮我查一下比特币今天的价格"),
 ("zh_wang", "推荐一部最近上映的动画电影"),
 ("zh_chen", "怎么用Excel做数据透视表"),
 ("en_amy", "Explain how a heat pump works"),
 ("en_bob", "What's the capital of Australia?"),
 ("mix_zoe", "给我讲个冷笑话"),
 ("zh_li", "上海有什么好玩的地方"),
 ("en_amy", "Translate 'good morning' into Japanese"),
 ("zh_wang", "周末去哪玩比较好"),
 ("en_bob", "Recommend a good podcast about history"),
]

ZH_TEMPLATES = [
 ("event", "用户{d}去{place}买了{thing}", "shopping"),
 ("event", "用户{d}和{person}一起看了电影《{movie}》", "movie"),
 ("preference", "用户喜欢{hobby}", "hobby"),
 ("fact", "用户的{rel}在{city}工作", "family"),
 ("event", "用户{d}在{city}参加了一个{conf}", "conference"),
 ("fact", "用户的{item}是{brand}的", "device"),
 ("preference", "用户买{cat}喜欢选{brand2}", "shopping"),
 ("event", "用户{d}给{person}转了{money}元", "payment"),
 ("fact", "用户{year}年毕业于{school}", "education"),
 ("event", "用户{d}把{doc}发给了{person}", "work"),
 ("preference", "用户看{genre}类的纪录片", "video"),
 ("event", "用户{d}预约了{service}", "appointment"),
]
EN_TEMPLATES = [
 ("event", "User bought {thing_en} at {store} {d_en}", "shopping"),
 ("event", "User watched {movie_en} with {person_en} {d_en}", "movie"),
 ("preference", "User enjoys {hobby_en}", "hobby"),
 ("fact", "User's {rel_en} works in {city_en}", "family"),
 ("event", "User attended a {conf_en} in {city_en} {d_en}", "conference"),
 ("fact", "User's {item_en} is made by {brand_en}", "device"),
 ("event", "User sent {money} dollars to {person_en} {d_en}", "payment"),
 ("fact", "User graduated from {school_en} in {year}", "education"),
 ("event", "User shared the {doc_en} with {person_en} {d_en}", "work"),
 ("preference", "User watches documentaries about {genre_en}", "video"),
 ("event", "User booked a {service_en} {d_en}", "appointment"),
]
V = {
 "d": ["昨天", "前天", "上周", "上个月", "今天上午", "周末"],
 "place": ["超市", "宜家", "优衣库", "菜市场", "苹果店", "书店", "药店"],
 "thing": ["一台空气净化器", "两本书", "一件羽绒服", "一箱牛奶", "一把雨伞", "一盆绿萝", "一双跑鞋", "一套茶具"],
 "person": ["小张", "老刘", "表姐", "同事阿杰", "大学室友", "邻居王阿姨"],
 "movie": ["流浪地球", "满江红", "封神", "长安三万里", "热辣滚烫", "飞驰人生"],
 "hobby": ["拼乐高", "下围棋", "弹吉他", "摄影", "做烘焙", "钓鱼", "打羽毛球", "画水彩"],
 "rel": ["哥哥", "表妹", "舅舅", "大学同学", "前同事"],
 "city": ["深圳", "南京", "武汉", "西安", "广州", "苏州", "青岛"],
 "conf": ["技术沙龙", "读书会", "行业峰会", "校友聚会", "产品发布会"],
 "item": ["手机", "笔记本电脑", "耳机", "手表", "平板", "相机"],
 "brand": ["华为", "小米", "苹果", "索尼", "联想", "大疆"],
 "cat": ["洗发水", "运动鞋", "牙膏", "零食", "床品"],
 "brand2": ["国货品牌", "进口品牌", "性价比高的", "有机认证的"],
 "money": ["200", "500", "1200", "88", "3000"],
 "year": ["2012", "2015", "2018", "2009"],
 "school": ["浙江大学", "武汉大学", "中山大学", "南京大学", "四川大学"],
 "doc": ["项目方案", "合同草稿", "周报", "设计稿", "预算表"],
 "genre": ["历史", "自然", "美食", "建筑", "太空"],
 "service": ["洗牙", "理发", "汽车保养", "家电维修", "宠物美容"],
 "d_en": ["yesterday", "last week", "on Sunday", "this morning", "two days ago", "last month"],
 "thing_en": ["a standing desk", "running shoes", "a rice cooker", "a winter jacket", "noise-cancelling headphones", "a yoga mat"],
 "store": ["Costco", "Target", "REI", "the Apple Store", "IKEA", "a thrift shop"],
 "movie_en": ["Dune Part Two", "Oppenheimer", "Inside Out 2", "The Martian", "Past Lives"],
 "person_en": ["Jake", "her sister", "a college friend", "coworker Dana", "the neighbors", "Uncle Ray"],
 "hobby_en": ["rock climbing", "baking sourdough", "playing chess online", "birdwatching", "knitting", "woodworking", "playing the piano"],
 "rel_en": ["brother", "cousin", "best friend", "former roommate", "aunt"],
 "city_en": ["Austin", "Chicago", "Boston", "Toronto", "Denver", "Portland", "Atlanta"],
 "conf_en": ["tech meetup", "book club", "industry summit", "alumni dinner", "product launch"],
 "item_en": ["phone", "laptop", "smartwatch", "tablet", "camera", "e-reader"],
 "brand_en": ["Samsung", "Lenovo", "Garmin", "Sony", "Dell", "Kobo"],
 "school_en": ["UC Berkeley", "Ohio State", "NYU", "the University of Michigan", "Georgia Tech"],
 "doc_en": ["project proposal", "contract draft", "weekly report", "design mockups", "budget sheet"],
 "genre_en": ["ancient history", "deep sea life", "street food", "architecture", "space exploration"],
 "service_en": ["haircut", "car service", "dental cleaning", "furniture delivery", "pet grooming"],
}

USERS = ["zh_li", "zh_wang", "zh_chen", "en_amy", "en_bob", "mix_zoe"]

def fill(tpl):
    out = tpl
    for k, vals in V.items():
        key = "{" + k + "}"
        while key in out:
            out = out.replace(key, random.choice(vals), 1)
    return out

memories, queries = [], []
n = 0
def mid():
    global n
    n += 1
    return "m%04d" % n

for (user, typ, content, subject, attrs, query) in T:
    i = mid()
    memories.append({"id": i, "user": user, "type": typ, "content": content, "subject": subject, "attributes": attrs})
    queries.append({"user": user, "query": query, "relevant": [i]})
    # The same memory under another user: must never be recalled for this one.
    other = random.choice([u for u in USERS if u != user])
    memories.append({"id": mid(), "user": other, "type": typ, "content": content, "subject": subject, "attributes": attrs})

# A second relevant memory for some queries (an event and the preference behind it).
extra = {0: ("event", "用户上个月在蜀香园办了会员卡", "restaurant", {"restaurant_name": "蜀香园"})}
for qi, (typ, content, subject, attrs) in extra.items():
    i = mid()
    memories.append({"id": i, "user": queries[qi]["user"], "type": typ, "content": content, "subject": subject, "attributes": attrs})
    queries[qi]["relevant"].append(i)

seen = set(m["content"] + m["user"] for m in memories)
for user in USERS:
    tpls = EN_TEMPLATES if user.startswith("en_") else ZH_TEMPLATES
    if user.startswith("mix_"):
        tpls = ZH_TEMPLATES + EN_TEMPLATES
    count = 0
    while count < 70:
        typ, tpl, subject = random.choice(tpls)
        c = fill(tpl)
        if c + user in seen:
            continue
        seen.add(c + user)
        memories.append({"id": mid(), "user": user, "type": typ, "content": c, "subject": subject, "attributes": {}})
        count += 1

for user, q in NO_ANSWER:
    queries.append({"user": user, "query": q, "relevant": []})

json.dump({"memories": memories, "queries": queries}, __import__("sys").stdout, ensure_ascii=False, indent=1)
