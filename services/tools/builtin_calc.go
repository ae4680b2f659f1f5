package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// calculatorArgs are calculator's arguments; its input schema is derived from them.
type calculatorArgs struct {
	Expression string `json:"expression" jsonschema:"Arithmetic expression, for example \"(12.5 * 4 + 3) / 2\" or \"sqrt(2) ^ 2\". Operators: + - * / % ^ and parentheses; functions: abs, sqrt, cbrt, exp, ln, log10, log2, sin, cos, tan, floor, ceil, round, min, max, pow; constants: pi, e."`
}

// Limits of the evaluator: it never runs code, only arithmetic on float64, and bounds the
// expression's size and nesting.
const (
	maxExpressionBytes = 1000
	maxExpressionDepth = 64
)

func calculatorBuiltin() *Builtin {
	b := newBuiltin(spec("calculator",
		"Evaluate an arithmetic expression exactly as written and return the number. Use it for any calculation (totals, percentages, unit conversions) instead of computing in your head.",
		derivedSchema, 2*time.Second, true, "math"),
		map[string]lengths{"expression": {min: 1, max: maxExpressionBytes}},
		func(ctx context.Context, in calculatorArgs) (any, error) {
			v, err := Evaluate(in.Expression)
			if err != nil {
				return nil, failf("cannot evaluate %q: %v", truncateRunes(in.Expression, 200), err)
			}
			return map[string]any{"expression": in.Expression, "result": json.Number(formatNumber(v))}, nil
		})
	b.Pure = true
	b.Spec.Annotations = readOnly()
	return b
}

func formatNumber(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', 15, 64)
}

// Evaluate computes an arithmetic expression. "^" (or "**") is power and binds tighter than
// unary minus, so -2^2 is -4; "%" is the floating-point remainder.
func Evaluate(expr string) (float64, error) {
	if len(expr) > maxExpressionBytes {
		return 0, fmt.Errorf("the expression is %d bytes; at most %d are allowed", len(expr), maxExpressionBytes)
	}
	p := &calcParser{src: expr}
	if err := p.lex(); err != nil {
		return 0, err
	}
	v, err := p.expr(0)
	if err != nil {
		return 0, err
	}
	if p.pos < len(p.toks) {
		return 0, fmt.Errorf("unexpected %q at position %d", p.toks[p.pos].text, p.toks[p.pos].at+1)
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("the result is not a finite number")
	}
	return v, nil
}

type calcToken struct {
	kind byte // 'n' number, 'i' identifier, or the operator character
	text string
	num  float64
	at   int
}

type calcParser struct {
	src  string
	toks []calcToken
	pos  int
}

// lex splits p.src into tokens: numbers, identifiers and operators; blanks between them
// are skipped.
func (p *calcParser) lex() error {
	s := p.src
	for i := 0; i < len(s); {
		c := s[i]
		var end int
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			end = i + 1
		case c >= '0' && c <= '9' || c == '.':
			var err error
			if end, err = p.lexNumber(i); err != nil {
				return err
			}
		case c < 0x80 && (unicode.IsLetter(rune(c))):
			end = p.lexIdent(i)
		default:
			if end = p.lexOperator(i); end == i {
				return fmt.Errorf("unexpected character %q at position %d", string([]rune(s[i:])[0]), i+1)
			}
		}
		i = end
	}
	if len(p.toks) == 0 {
		return fmt.Errorf("the expression is empty")
	}
	return nil
}

// lexNumber adds the number starting at i (digits, '.', '_' separators, an optional
// exponent) and returns where it ends.
func (p *calcParser) lexNumber(i int) (int, error) {
	s := p.src
	j := i
	for j < len(s) && (isDigit(s[j]) || s[j] == '.' || s[j] == '_') {
		j++
	}
	// An exponent counts only with digits after it: "2e" is 2 followed by the identifier e.
	if j < len(s) && (s[j] == 'e' || s[j] == 'E') {
		k := j + 1
		if k < len(s) && (s[k] == '+' || s[k] == '-') {
			k++
		}
		if k < len(s) && isDigit(s[k]) {
			for k < len(s) && isDigit(s[k]) {
				k++
			}
			j = k
		}
	}
	text := strings.ReplaceAll(s[i:j], "_", "")
	v, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return 0, fmt.Errorf("%q at position %d is not a number", s[i:j], i+1)
	}
	p.toks = append(p.toks, calcToken{kind: 'n', text: s[i:j], num: v, at: i})
	return j, nil
}

// lexIdent adds the ASCII identifier starting at i, lower-cased, and returns where it ends.
func (p *calcParser) lexIdent(i int) int {
	s := p.src
	j := i
	for j < len(s) && s[j] < 0x80 && (unicode.IsLetter(rune(s[j])) || isDigit(s[j])) {
		j++
	}
	p.toks = append(p.toks, calcToken{kind: 'i', text: strings.ToLower(s[i:j]), at: i})
	return j
}

// lexOperator adds the operator starting at i and returns where it ends, or i when there
// is none. "**" is '^'; the typeset ×, ÷ and − are *, / and -.
func (p *calcParser) lexOperator(i int) int {
	s := p.src
	c := s[i]
	switch {
	case c == '*' && i+1 < len(s) && s[i+1] == '*':
		p.toks = append(p.toks, calcToken{kind: '^', text: "**", at: i})
		return i + 2
	case strings.IndexByte("+-*/%^(),", c) >= 0:
		p.toks = append(p.toks, calcToken{kind: c, text: string(c), at: i})
		return i + 1
	}
	for _, op := range [...]struct {
		text string
		kind byte
	}{{"×", '*'}, {"÷", '/'}, {"−", '-'}} {
		if strings.HasPrefix(s[i:], op.text) {
			p.toks = append(p.toks, calcToken{kind: op.kind, text: op.text, at: i})
			return i + len(op.text)
		}
	}
	return i
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func (p *calcParser) peek() byte {
	if p.pos < len(p.toks) {
		return p.toks[p.pos].kind
	}
	return 0
}

func (p *calcParser) errEnd() error {
	return fmt.Errorf("the expression ends too early")
}

// expr := term (("+"|"-") term)*
func (p *calcParser) expr(depth int) (float64, error) {
	if depth > maxExpressionDepth {
		return 0, fmt.Errorf("the expression nests deeper than %d levels", maxExpressionDepth)
	}
	v, err := p.term(depth)
	if err != nil {
		return 0, err
	}
	for {
		switch p.peek() {
		case '+', '-':
			op := p.toks[p.pos].kind
			p.pos++
			r, err := p.term(depth)
			if err != nil {
				return 0, err
			}
			if op == '+' {
				v += r
			} else {
				v -= r
			}
		default:
			return v, nil
		}
	}
}

// term := unary (("*"|"/"|"%") unary)*
func (p *calcParser) term(depth int) (float64, error) {
	v, err := p.unary(depth)
	if err != nil {
		return 0, err
	}
	for {
		switch p.peek() {
		case '*', '/', '%':
			op := p.toks[p.pos]
			p.pos++
			r, err := p.unary(depth)
			if err != nil {
				return 0, err
			}
			switch op.kind {
			case '*':
				v *= r
			case '/':
				if r == 0 {
					return 0, fmt.Errorf("division by zero at position %d", op.at+1)
				}
				v /= r
			case '%':
				if r == 0 {
					return 0, fmt.Errorf("remainder by zero at position %d", op.at+1)
				}
				v = math.Mod(v, r)
			}
		default:
			return v, nil
		}
	}
}

// unary := ("+"|"-") unary | power
func (p *calcParser) unary(depth int) (float64, error) {
	if depth > maxExpressionDepth {
		return 0, fmt.Errorf("the expression nests deeper than %d levels", maxExpressionDepth)
	}
	switch p.peek() {
	case '-':
		p.pos++
		v, err := p.unary(depth + 1)
		return -v, err
	case '+':
		p.pos++
		return p.unary(depth + 1)
	}
	return p.power(depth)
}

// power := primary ("^" unary)?, right-associative.
func (p *calcParser) power(depth int) (float64, error) {
	v, err := p.primary(depth)
	if err != nil {
		return 0, err
	}
	if p.peek() == '^' {
		p.pos++
		r, err := p.unary(depth + 1)
		if err != nil {
			return 0, err
		}
		return math.Pow(v, r), nil
	}
	return v, nil
}

var calcConstants = map[string]float64{"pi": math.Pi, "e": math.E}

var calcFuncs = map[string]struct {
	min, max int
	f        func(a []float64) float64
}{
	"abs":   {1, 1, func(a []float64) float64 { return math.Abs(a[0]) }},
	"sqrt":  {1, 1, func(a []float64) float64 { return math.Sqrt(a[0]) }},
	"cbrt":  {1, 1, func(a []float64) float64 { return math.Cbrt(a[0]) }},
	"exp":   {1, 1, func(a []float64) float64 { return math.Exp(a[0]) }},
	"ln":    {1, 1, func(a []float64) float64 { return math.Log(a[0]) }},
	"log10": {1, 1, func(a []float64) float64 { return math.Log10(a[0]) }},
	"log2":  {1, 1, func(a []float64) float64 { return math.Log2(a[0]) }},
	"sin":   {1, 1, func(a []float64) float64 { return math.Sin(a[0]) }},
	"cos":   {1, 1, func(a []float64) float64 { return math.Cos(a[0]) }},
	"tan":   {1, 1, func(a []float64) float64 { return math.Tan(a[0]) }},
	"floor": {1, 1, func(a []float64) float64 { return math.Floor(a[0]) }},
	"ceil":  {1, 1, func(a []float64) float64 { return math.Ceil(a[0]) }},
	"round": {1, 2, func(a []float64) float64 {
		if len(a) == 2 {
			s := math.Pow(10, math.Trunc(a[1]))
			return math.Round(a[0]*s) / s
		}
		return math.Round(a[0])
	}},
	"pow": {2, 2, func(a []float64) float64 { return math.Pow(a[0], a[1]) }},
	"min": {1, 64, func(a []float64) float64 {
		m := a[0]
		for _, x := range a[1:] {
			m = math.Min(m, x)
		}
		return m
	}},
	"max": {1, 64, func(a []float64) float64 {
		m := a[0]
		for _, x := range a[1:] {
			m = math.Max(m, x)
		}
		return m
	}},
}

// primary := number | constant | function "(" args ")" | "(" expr ")"
func (p *calcParser) primary(depth int) (float64, error) {
	if p.pos >= len(p.toks) {
		return 0, p.errEnd()
	}
	t := p.toks[p.pos]
	p.pos++
	switch t.kind {
	case 'n':
		return t.num, nil
	case '(':
		v, err := p.expr(depth + 1)
		if err != nil {
			return 0, err
		}
		if p.peek() != ')' {
			return 0, fmt.Errorf("missing ')' for the '(' at position %d", t.at+1)
		}
		p.pos++
		return v, nil
	case 'i':
		if c, ok := calcConstants[t.text]; ok && p.peek() != '(' {
			return c, nil
		}
		fn, ok := calcFuncs[t.text]
		if !ok {
			return 0, fmt.Errorf("unknown name %q at position %d", t.text, t.at+1)
		}
		if p.peek() != '(' {
			return 0, fmt.Errorf("%s needs its arguments in parentheses, as in %s(2)", t.text, t.text)
		}
		p.pos++
		var args []float64
		if p.peek() != ')' {
			for {
				v, err := p.expr(depth + 1)
				if err != nil {
					return 0, err
				}
				args = append(args, v)
				if p.peek() != ',' {
					break
				}
				p.pos++
			}
		}
		if p.peek() != ')' {
			return 0, fmt.Errorf("missing ')' after the arguments of %s", t.text)
		}
		p.pos++
		if len(args) < fn.min || len(args) > fn.max {
			return 0, fmt.Errorf("%s takes %d to %d arguments, got %d", t.text, fn.min, fn.max, len(args))
		}
		return fn.f(args), nil
	default:
		return 0, fmt.Errorf("unexpected %q at position %d", t.text, t.at+1)
	}
}
