package main

import (
	"fmt"
	"strconv"
)

// maxExpression bounds the calculator's input, and so its recursion.
const maxExpression = 1000

// evaluate computes an arithmetic expression of numbers, + - * / and parentheses.
func evaluate(expr string) (float64, error) {
	if len(expr) > maxExpression {
		return 0, fmt.Errorf("the expression is %d bytes; at most %d are allowed", len(expr), maxExpression)
	}
	p := &calc{src: expr}
	v, err := p.sum()
	if err != nil {
		return 0, err
	}
	if p.skip(); p.pos < len(p.src) {
		return 0, fmt.Errorf("unexpected %q at position %d", p.src[p.pos], p.pos+1)
	}
	return v, nil
}

type calc struct {
	src string
	pos int
}

func (p *calc) skip() {
	for p.pos < len(p.src) && p.src[p.pos] == ' ' {
		p.pos++
	}
}

// next returns the next non-blank byte, 0 at the end.
func (p *calc) next() byte {
	if p.skip(); p.pos < len(p.src) {
		return p.src[p.pos]
	}
	return 0
}

func (p *calc) sum() (float64, error) {
	v, err := p.product()
	for err == nil {
		op := p.next()
		if op != '+' && op != '-' {
			return v, nil
		}
		p.pos++
		var w float64
		if w, err = p.product(); op == '+' {
			v += w
		} else {
			v -= w
		}
	}
	return 0, err
}

func (p *calc) product() (float64, error) {
	v, err := p.factor()
	for err == nil {
		op := p.next()
		if op != '*' && op != '/' {
			return v, nil
		}
		p.pos++
		var w float64
		if w, err = p.factor(); op == '*' {
			v *= w
		} else if w == 0 {
			err = fmt.Errorf("division by zero")
		} else {
			v /= w
		}
	}
	return 0, err
}

func (p *calc) factor() (float64, error) {
	switch c := p.next(); {
	case c == '-':
		p.pos++
		v, err := p.factor()
		return -v, err
	case c == '(':
		p.pos++
		v, err := p.sum()
		if err == nil && p.next() != ')' {
			err = fmt.Errorf("missing ) at position %d", p.pos+1)
		}
		p.pos++
		return v, err
	case c >= '0' && c <= '9' || c == '.':
		start := p.pos
		for p.pos < len(p.src) && (p.src[p.pos] >= '0' && p.src[p.pos] <= '9' || p.src[p.pos] == '.') {
			p.pos++
		}
		return strconv.ParseFloat(p.src[start:p.pos], 64)
	case c == 0:
		return 0, fmt.Errorf("the expression ends where a number is expected")
	default:
		return 0, fmt.Errorf("unexpected %q at position %d", c, p.pos+1)
	}
}
