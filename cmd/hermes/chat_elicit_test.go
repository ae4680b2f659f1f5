package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// lines is a lineReader over fixed answers.
type lines []string

func (l *lines) ReadLine(context.Context) (string, error) {
	if len(*l) == 0 {
		return "", errQuit
	}
	s := (*l)[0]
	*l = (*l)[1:]
	return s, nil
}

func (l *lines) Close() error { return nil }

// TestFillForm: the chat asks for each field of an elicitation form (required ones first),
// converts the answers to the fields' types, asks again after a bad answer, uses defaults for
// empty answers, and stops at /decline.
func TestFillForm(t *testing.T) {
	const schema = `{"type":"object","required":["name","guests"],"properties":{
		"name":{"type":"string","title":"Your name"},
		"guests":{"type":"integer","minimum":1},
		"terrace":{"type":"boolean","default":false},
		"seating":{"type":"string","enum":["inside","outside"]},
		"note":{"type":"string","description":"anything else"}}}`
	fields, err := formFields(schema)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, f := range fields {
		order = append(order, f.name)
	}
	if d := cmp.Diff([]string{"name", "guests", "note", "seating", "terrace"}, order); d != "" {
		t.Errorf("field order (-want +got):\n%s", d)
	}
	for _, tc := range []struct {
		name       string
		answers    lines
		want       map[string]any
		wantAction string
		wantAsked  string
	}{
		{"answered", lines{"Ada", "two", "2", "", "terrace", "outside", ""}, map[string]any{"name": "Ada", "guests": int64(2), "seating": "outside", "terrace": false}, "accept", "choose one of inside, outside"},
		{"a required field left empty is asked again", lines{"", "Ada", "3", "window seat", "inside", "yes"}, map[string]any{"name": "Ada", "guests": int64(3), "note": "window seat", "seating": "inside", "terrace": true}, "accept", "an answer is required"},
		{"declined", lines{"Ada", "/decline"}, nil, "decline", "Your name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var said strings.Builder
			out := func(f string, a ...any) { fmt.Fprintf(&said, f, a...) }
			got, action, err := fillForm(context.Background(), &tc.answers, out, fields)
			if action != tc.wantAction || (action == "accept") != (err == nil) || (action == "decline" && !errors.Is(err, errDeclined)) {
				t.Fatalf("action %q, error %v; want %q", action, err, tc.wantAction)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("content (-want +got):\n%s", d)
			}
			if !strings.Contains(said.String(), tc.wantAsked) {
				t.Errorf("the chat said %q, want it to contain %q", said.String(), tc.wantAsked)
			}
		})
	}
}
