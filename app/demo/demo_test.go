package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestDemo plays the whole demo, as `hermes demo` does, and checks the transcript.
func TestDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := Run(ctx, Options{Out: &out, DataDir: t.TempDir()}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"SCRIPTED MODEL",
		"memory written: (preference",
		"filled from memory",
		"restaurant_name = \"蜀香园\"",
		`"party_size":2`,
		"已为您在蜀香园订好明天 19:00、2位的座位",
		"Token composition of the last request and its reply: system + tool schemas",
		"The demo played end to end.",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("transcript lacks %q:\n%s", want, got)
		}
	}
}
