package main

import (
	"strings"
	"testing"
)

func TestEvaluate(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want float64
		err  bool
	}{
		{expr: "2*3+1", want: 7},
		{expr: " 1 + 2 * (3 - 1) / 4 ", want: 2},
		{expr: "-(2.5*2)", want: -5},
		{expr: "10/4", want: 2.5},
		{expr: "1/0", err: true},
		{expr: "", err: true},
		{expr: "2*", err: true},
		{expr: "(1+2", err: true},
		{expr: "1+2)", err: true},
		{expr: "2^3", err: true},
		{expr: strings.Repeat("(", 2000), err: true},
	} {
		got, err := evaluate(tc.expr)
		if (err != nil) != tc.err || (!tc.err && got != tc.want) {
			t.Errorf("evaluate(%q) = %v, %v; want %v (error %v)", tc.expr, got, err, tc.want, tc.err)
		}
	}
}

// FuzzEvaluate checks that no input panics, and that what evaluates also evaluates with
// blanks around it.
func FuzzEvaluate(f *testing.F) {
	for _, s := range []string{"2*3+1", "-(1)/3", "((2))", "1..2", ")("} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := evaluate(s)
		if err != nil || len(s)+2 > maxExpression {
			return
		}
		w, err := evaluate(" " + s + " ")
		if err != nil || (w != v && v == v) {
			t.Errorf("evaluate(%q) = %v but with blanks %v, %v", s, v, w, err)
		}
	})
}
