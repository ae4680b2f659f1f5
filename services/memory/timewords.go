package memory

import (
	"regexp"
	"strconv"
	"strings"
	"time"
)

// timeWindow is a span of time a query names ("yesterday", "上周", "in May 2023"), read against
// the time the query is asked at.
type timeWindow struct {
	from, to time.Time // [from, to)
	phrase   string
	relative bool // named relative to the time of asking ("yesterday", "上周", "3 days ago")
}

func (w timeWindow) contains(t time.Time) bool { return !t.Before(w.from) && t.Before(w.to) }

var (
	reISODate   = regexp.MustCompile(`\b(\d{4})-(\d{1,2})-(\d{1,2})\b`)
	reZhDate    = regexp.MustCompile(`(?:(\d{4})年)?(\d{1,2})月(?:(\d{1,2})[日号])?`)
	reEnDayMon  = regexp.MustCompile(`(?i)\b(\d{1,2})(?:st|nd|rd|th)?\s+(january|february|march|april|may|june|july|august|september|october|november|december)(?:,?\s+(\d{4}))?\b`)
	reEnMonDay  = regexp.MustCompile(`(?i)\b(january|february|march|april|may|june|july|august|september|october|november|december)(?:\s+(\d{1,2})(?:st|nd|rd|th)?)?(?:,?\s+(\d{4}))?\b`)
	reAgo       = regexp.MustCompile(`(?i)\b(\d+|a|an|one|two|three|four|five|six)\s+(day|week|month|year)s?\s+ago\b`)
	reZhAgo     = regexp.MustCompile(`(\d+|[一二两三四五六七八九十])(天|周|个?星期|个月|年)[前以]`)
	monthNames  = []string{"january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november", "december"}
	monthByName = func() map[string]time.Month {
		m := make(map[string]time.Month, len(monthNames))
		for i, name := range monthNames {
			m[name] = time.Month(i + 1)
		}
		return m
	}()
	smallNumber = map[string]int{"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
		"一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9, "十": 10}
)

// queryTimeWindow finds the first time expression of a query, in English or Chinese: relative
// days, weeks, months and years ("yesterday", "last week", "3 days ago", "上个月", "前天"), and
// dates ("2023-05-07", "7 May 2023", "May 2023", "5月7日"). A relative span gets a day of slack
// on either side, since people say "last week" of something nine days ago.
func queryTimeWindow(query string, ref time.Time) (timeWindow, bool) {
	q := strings.ToLower(query)
	day := time.Date(ref.Year(), ref.Month(), ref.Day(), 0, 0, 0, 0, ref.Location())
	// Dates first: they are exact.
	if w, ok := dateWindow(q, ref); ok {
		return w, true
	}
	if m := find(reAgo, mayAgo(q), q); m != nil {
		n, ok := smallNumber[m[1]]
		if !ok {
			n, _ = strconv.Atoi(m[1])
		}
		return agoWindow(day, n, m[2], m[0])
	}
	if m := find(reZhAgo, mayZhAgo(query), query); m != nil {
		n, ok := smallNumber[m[1]]
		if !ok {
			n, _ = strconv.Atoi(m[1])
		}
		unit := map[string]string{"天": "day", "周": "week", "星期": "week", "个星期": "week", "个月": "month", "年": "year"}[m[2]]
		return agoWindow(day, n, unit, m[0])
	}
	return relativeWindow(q, day)
}

// find is re.FindStringSubmatch(s) where may, else nil. may is a cheap guard's answer for s,
// a guard that every string re matches passes (TestTimeGuardsAdmitEveryMatch, FuzzTimeGuards):
// the patterns backtrack, they run on every recall's query, and most queries name no time
// (unguarded, the six took 18 µs for a short English question and 87 µs a turn for the peer
// harness' Chinese one).
func find(re *regexp.Regexp, may bool, s string) []string {
	if !may {
		return nil
	}
	return re.FindStringSubmatch(s)
}

func mayISODate(q string) bool { return strings.IndexByte(q, '-') >= 0 }
func mayZhDate(q string) bool  { return strings.Contains(q, "月") }
func mayZhAgo(q string) bool   { return strings.Contains(q, "前") || strings.Contains(q, "以") }

// mayAgo takes the lower-cased query: "ago" has no letter that case folding maps from another.
func mayAgo(q string) bool { return strings.Contains(q, "ago") }

// mayMonthName takes the lower-cased query. (?i) matches "ſ" (long s) for "s", which lower-casing
// keeps; the Kelvin sign, which it matches for "k", lower-cases to "k".
func mayMonthName(q string) bool {
	for _, m := range monthNames {
		if strings.Contains(q, m) {
			return true
		}
	}
	return strings.Contains(q, "ſ")
}

// daySpan is the window of days days from from, widened by a day on each side (a date in a
// query is the user's, in their time zone, and a memory's time is often approximate).
func daySpan(from time.Time, days int, phrase string) (timeWindow, bool) {
	return timeWindow{from: from.AddDate(0, 0, -1), to: from.AddDate(0, 0, days+1), phrase: phrase}, true
}

// daysBetween is the number of calendar days from from to to.
func daysBetween(from, to time.Time) int { return int(to.Sub(from).Hours()/24 + 0.5) }

// dateWindow is the window of a date the (lower-cased) query names: ISO, Chinese, "3 May",
// "May 3" (a month name alone is too often a word, "may": only with a day or a year).
func dateWindow(q string, ref time.Time) (timeWindow, bool) {
	loc := ref.Location()
	month := func(y int, mo time.Month, phrase string) (timeWindow, bool) {
		from := time.Date(y, mo, 1, 0, 0, 0, 0, loc)
		return daySpan(from, daysBetween(from, from.AddDate(0, 1, 0)), phrase)
	}
	if m := find(reISODate, mayISODate(q), q); m != nil {
		y, _ := strconv.Atoi(m[1])
		mo, _ := strconv.Atoi(m[2])
		d, _ := strconv.Atoi(m[3])
		if mo >= 1 && mo <= 12 && d >= 1 && d <= 31 {
			return daySpan(time.Date(y, time.Month(mo), d, 0, 0, 0, 0, loc), 1, m[0])
		}
	}
	if m := find(reZhDate, mayZhDate(q), q); m != nil {
		y := ref.Year()
		if m[1] != "" {
			y, _ = strconv.Atoi(m[1])
		}
		mo, _ := strconv.Atoi(m[2])
		if mo >= 1 && mo <= 12 {
			if m[3] != "" {
				d, _ := strconv.Atoi(m[3])
				return daySpan(time.Date(y, time.Month(mo), d, 0, 0, 0, 0, loc), 1, m[0])
			}
			return month(y, time.Month(mo), m[0])
		}
	}
	named := mayMonthName(q)
	if m := find(reEnDayMon, named, q); m != nil {
		d, _ := strconv.Atoi(m[1])
		y := ref.Year()
		if m[3] != "" {
			y, _ = strconv.Atoi(m[3])
		}
		return daySpan(time.Date(y, monthByName[m[2]], d, 0, 0, 0, 0, loc), 1, m[0])
	}
	if m := find(reEnMonDay, named, q); m != nil && (m[2] != "" || m[3] != "") {
		y := ref.Year()
		if m[3] != "" {
			y, _ = strconv.Atoi(m[3])
		}
		if m[2] != "" {
			d, _ := strconv.Atoi(m[2])
			return daySpan(time.Date(y, monthByName[m[1]], d, 0, 0, 0, 0, loc), 1, m[0])
		}
		return month(y, monthByName[m[1]], m[0])
	}
	return timeWindow{}, false
}

// relativeWindow is the window of a relative day, week, month or year the query names
// ("yesterday", "上周").
func relativeWindow(q string, day time.Time) (timeWindow, bool) {
	loc := day.Location()
	weekStart := day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7)) // Monday
	monthStart := time.Date(day.Year(), day.Month(), 1, 0, 0, 0, 0, loc)
	for _, r := range []struct {
		words []string
		from  time.Time
		days  int
	}{
		{[]string{"the day before yesterday", "前天"}, day.AddDate(0, 0, -2), 1},
		{[]string{"yesterday", "昨天", "昨晚"}, day.AddDate(0, 0, -1), 1},
		{[]string{"today", "tonight", "this morning", "今天", "今晚", "今早"}, day, 1},
		{[]string{"last weekend", "上周末", "上个周末"}, weekStart.AddDate(0, 0, -2), 2},
		{[]string{"this weekend", "这周末", "这个周末", "本周末"}, weekStart.AddDate(0, 0, 5), 2},
		{[]string{"last week", "上周", "上个星期", "上星期", "上礼拜"}, weekStart.AddDate(0, 0, -7), 7},
		{[]string{"this week", "这周", "本周", "这个星期", "这星期"}, weekStart, 7},
		{[]string{"last month", "上个月", "上月"}, monthStart.AddDate(0, -1, 0), daysBetween(monthStart.AddDate(0, -1, 0), monthStart)},
		{[]string{"this month", "这个月", "本月"}, monthStart, daysBetween(monthStart, monthStart.AddDate(0, 1, 0))},
		{[]string{"last year", "去年"}, time.Date(day.Year()-1, 1, 1, 0, 0, 0, 0, loc), daysBetween(time.Date(day.Year()-1, 1, 1, 0, 0, 0, 0, loc), time.Date(day.Year(), 1, 1, 0, 0, 0, 0, loc))},
	} {
		for _, w := range r.words {
			if strings.Contains(q, w) {
				win, ok := daySpan(r.from, r.days, w)
				win.relative = true
				return win, ok
			}
		}
	}
	return timeWindow{}, false
}

func agoWindow(day time.Time, n int, unit, phrase string) (timeWindow, bool) {
	if n <= 0 || n > 1000 {
		return timeWindow{}, false
	}
	var at time.Time
	slack := 1
	switch unit {
	case "day":
		at = day.AddDate(0, 0, -n)
	case "week":
		at, slack = day.AddDate(0, 0, -7*n), 4
	case "month":
		at, slack = day.AddDate(0, -n, 0), 15
	case "year":
		at, slack = day.AddDate(-n, 0, 0), 183
	default:
		return timeWindow{}, false
	}
	return timeWindow{at.AddDate(0, 0, -slack), at.AddDate(0, 0, slack+1), phrase, true}, true
}
