package tools

import (
	"context"
	"strings"
	"time"

	// The time zone database is compiled in, so current_time works in minimal containers.
	_ "time/tzdata"
)

// currentTimeArgs are current_time's arguments; its input schema is derived from them.
type currentTimeArgs struct {
	Timezone string `json:"timezone,omitempty" jsonschema:"IANA time zone name, for example \"Europe/Paris\", \"America/New_York\" or \"Asia/Shanghai\"; default \"UTC\""`
}

// currentTimeOutput is what current_time returns.
type currentTimeOutput struct {
	Time      string `json:"time"`
	Date      string `json:"date"`
	Weekday   string `json:"weekday"`
	Timezone  string `json:"timezone"`
	UTCOffset string `json:"utc_offset"`
	Unix      int64  `json:"unix"`
}

func currentTimeBuiltin() *Builtin {
	return currentTimeAt(time.Now)
}

// currentTimeAt takes the clock as a parameter so tests can fix it.
func currentTimeAt(now func() time.Time) *Builtin {
	b := newBuiltin(spec("current_time",
		"Get the current date and time in a time zone (IANA name such as Europe/Paris). Use it whenever the answer depends on today's date, the time, or the day of the week.",
		derivedSchema, 2*time.Second, true, "time"),
		map[string]lengths{"timezone": {max: 64}},
		func(ctx context.Context, in currentTimeArgs) (any, error) {
			name := strings.TrimSpace(in.Timezone)
			if name == "" {
				name = "UTC"
			}
			loc, err := time.LoadLocation(name)
			if err != nil || strings.EqualFold(name, "local") {
				return nil, failf("unknown time zone %q: use an IANA name such as \"Europe/Paris\", \"America/New_York\" or \"UTC\"", name)
			}
			t := now().In(loc)
			return currentTimeOutput{
				Time:      t.Format(time.RFC3339),
				Date:      t.Format("2006-01-02"),
				Weekday:   t.Weekday().String(),
				Timezone:  loc.String(),
				UTCOffset: t.Format("-07:00"),
				Unix:      t.Unix(),
			}, nil
		})
	b.Spec.Annotations = readOnly()
	return b
}
