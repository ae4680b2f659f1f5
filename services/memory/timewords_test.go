package memory

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"
)

// timeGuards pairs each time pattern with the guard queryTimeWindow runs before it, and says
// whether the pattern sees the lower-cased query.
var timeGuards = []struct {
	name  string
	re    *regexp.Regexp
	may   func(string) bool
	lower bool
}{
	{"iso date", reISODate, mayISODate, true},
	{"zh date", reZhDate, mayZhDate, true},
	{"en day month", reEnDayMon, mayMonthName, true},
	{"en month day", reEnMonDay, mayMonthName, true},
	{"ago", reAgo, mayAgo, true},
	{"zh ago", reZhAgo, mayZhAgo, false},
}

// timeQueries generates queries in both languages, with and without time expressions, in mixed
// case and with the characters that case folding maps onto ASCII letters.
func timeQueries(n int) []string {
	r := rand.New(rand.NewPCG(7, 25))
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	months := append([]string{}, monthNames...)
	var out []string
	for range n {
		month := months[r.IntN(len(months))]
		switch r.IntN(4) {
		case 1:
			month = strings.ToUpper(month)
		case 2:
			month = strings.ToUpper(month[:1]) + month[1:]
		case 3:
			month = strings.NewReplacer("s", "ſ", "k", "\u212a").Replace(month)
		}
		day, year := fmt.Sprint(1+r.IntN(31)), fmt.Sprint(1990+r.IntN(50))
		expr := pick(
			year+"-"+fmt.Sprintf("%02d", 1+r.IntN(12))+"-"+fmt.Sprintf("%02d", 1+r.IntN(31)),
			day+pick("", "st", "nd", "th")+" "+month+pick("", " "+year, ", "+year),
			month+pick("", " "+day, " "+day+"th")+pick("", " "+year, ", "+year),
			pick("a", "an", "one", "two", "3", "17", "six")+" "+pick("day", "week", "month", "year")+pick("", "s")+" "+pick("ago", "AGO", "Ago"),
			pick("", year+"年")+fmt.Sprint(1+r.IntN(12))+"月"+pick("", day+"日", day+"号"),
			pick("3", "两", "十", "一")+pick("天", "周", "星期", "个星期", "个月", "年")+pick("前", "以前", "以后"),
			pick("yesterday", "last week", "上周", "昨天", "this month"),
			"", "", "",
		)
		filler := pick("what is 17 * 23?", "remind me what I said", "我上次说的餐厅叫什么", "use the calculator on 12-4",
			"the meeting agenda", "Wagon", "mayor of the town", "sagoo", "ſ and K", "以后再说", "月亮", "12 may")
		q := pick(filler+" "+expr, expr+" "+filler, filler, expr)
		out = append(out, q)
	}
	return out
}

// TestTimeGuardsAdmitEveryMatch: each guard passes every query its pattern matches, so the
// guarded search finds what the pattern alone finds.
func TestTimeGuardsAdmitEveryMatch(t *testing.T) {
	matched := map[string]int{}
	for _, q := range timeQueries(20000) {
		for _, g := range timeGuards {
			s := q
			if g.lower {
				s = strings.ToLower(q)
			}
			if g.re.MatchString(s) {
				matched[g.name]++
				if !g.may(s) {
					t.Errorf("%s: guard refuses %q, which the pattern matches", g.name, s)
				}
			}
		}
	}
	for _, g := range timeGuards {
		if matched[g.name] == 0 {
			t.Errorf("%s: no generated query matches the pattern; the test checks nothing", g.name)
		}
	}
}

func FuzzTimeGuards(f *testing.F) {
	for _, q := range timeQueries(50) {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, q string) {
		for _, g := range timeGuards {
			s := q
			if g.lower {
				s = strings.ToLower(q)
			}
			if g.re.MatchString(s) && !g.may(s) {
				t.Errorf("%s: guard refuses %q, which the pattern matches", g.name, s)
			}
		}
	})
}

// BenchmarkQueryTimeWindow: queries that name no time (most) and ones that do.
func BenchmarkQueryTimeWindow(b *testing.B) {
	ref := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct{ name, q string }{
		{"en-none", "What is 1234 * 5678? Use the calculator and tell me the result."},
		{"zh-none", "我上次说想去的那家餐厅叫什么名字？"},
		{"en-date", "What did I tell you on 7 May 2023 about the trip?"},
		{"zh-ago", "三天前我们聊了什么"},
	} {
		q := tc.q
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				queryTimeWindow(q, ref)
			}
		})
	}
}
