package tools

import (
	"fmt"
	"strconv"
	"strings"
)

// Limits of a tool schema's cost, checked before it is compiled, wherever a schema enters (the
// API, the tools file, tools an MCP server declares, specs read back from the store). A schema
// of a few kilobytes can otherwise describe an exponential amount of work: a chain of $defs
// whose anyOf names the next definition twice expands to 2^levels subschemas, and validating a
// failing value walks all of them (24 levels took the process down). The costs are measured
// after $ref expansion, with recursive references unrolled as deep as arguments may nest.
const (
	// maxSchemaDepth bounds the nesting of the schema document itself.
	maxSchemaDepth = 64
	// maxSchemaNodes bounds the subschemas after $ref expansion.
	maxSchemaNodes = 20_000
	// maxSchemaBranches bounds the allOf/anyOf/oneOf branches after $ref expansion: each is
	// tried, and reported on, when a value fails.
	maxSchemaBranches = 2_000
	// maxObjectNesting bounds how deeply the described value nests objects and arrays (not
	// counting recursion). OpenAI documents 10 levels of nesting for function parameters in
	// strict mode; Hermes takes the same so that every tool it accepts can be offered to it.
	maxObjectNesting = 10
	// maxArgumentDepth bounds the JSON nesting of a tool's arguments, which also bounds how far a
	// recursive schema can be followed during validation.
	maxArgumentDepth = 32
)

// schemaCost is what a schema costs after $ref expansion.
type schemaCost struct {
	nodes, branches, nesting int
}

// sameLevel keywords apply their subschemas to the same value; descending keywords to parts of
// it (properties, items, …), one level deeper.
var (
	sameLevelOne  = []string{"not", "if", "then", "else"}
	sameLevelMany = []string{"allOf", "anyOf", "oneOf"}
	descendOne    = []string{"additionalProperties", "unevaluatedProperties", "propertyNames", "additionalItems", "unevaluatedItems", "contains", "contentSchema"}
	descendMaps   = []string{"properties", "patternProperties"}
	sameLevelMaps = []string{"dependentSchemas", "dependencies"}
)

// measureSchema computes a schema document's cost and refuses it above the limits. References
// must stay inside the document: "#", "#/json/pointer" or "#name" of an $anchor.
func measureSchema(doc any) (schemaCost, error) {
	m := &costMeter{root: doc, anchors: map[string]string{}, memo: map[costKey]expanded{}, nestMemo: map[string]int{}}
	if err := m.scan(doc, "", 0); err != nil {
		return schemaCost{}, err
	}
	e, err := m.cost(doc, "", maxArgumentDepth)
	if err != nil {
		return schemaCost{}, err
	}
	c := schemaCost{nodes: e.nodes, branches: e.branches, nesting: m.nest(doc, "")}
	if c.nesting > maxObjectNesting {
		return c, fmt.Errorf("nests objects and arrays %d levels deep; at most %d are allowed (the limit model providers document for function parameters)", c.nesting, maxObjectNesting)
	}
	return c, nil
}

type costKey struct {
	ptr   string
	depth int
}

// costMeter measures one document. memo holds finished (pointer, depth) costs; visiting the
// ones being computed, to find references that loop without descending.
type costMeter struct {
	root     any
	anchors  map[string]string
	memo     map[costKey]expanded
	visiting map[costKey]bool
	nestMemo map[string]int
	onPath   map[string]bool
}

// expanded is a node's cost after $ref expansion: subschemas and combinator branches, each
// saturating just above its limit.
type expanded struct{ nodes, branches int }

func (e *expanded) add(o expanded) {
	e.nodes = min(e.nodes+o.nodes, maxSchemaNodes+1)
	e.branches = min(e.branches+o.branches, maxSchemaBranches+1)
}

// check stops the walk as soon as a limit is passed, so measuring costs at most the limits.
func (e expanded) check() error {
	switch {
	case e.nodes > maxSchemaNodes:
		return fmt.Errorf("expands to more than %d subschemas once its $refs are followed (the limit is %d); name shared definitions fewer times or flatten the schema", maxSchemaNodes, maxSchemaNodes)
	case e.branches > maxSchemaBranches:
		return fmt.Errorf("has more than %d allOf/anyOf/oneOf branches once its $refs are followed (the limit is %d)", maxSchemaBranches, maxSchemaBranches)
	}
	return nil
}

// scan checks the document's depth and collects $anchor names.
func (m *costMeter) scan(v any, ptr string, depth int) error {
	if depth > maxSchemaDepth {
		return fmt.Errorf("nests %d levels deep at %s; at most %d are allowed", depth, orTop(ptr), maxSchemaDepth)
	}
	switch x := v.(type) {
	case map[string]any:
		for _, k := range []string{"$anchor", "$dynamicAnchor"} {
			if a, ok := x[k].(string); ok {
				m.anchors[a] = ptr
			}
		}
		for k, sub := range x {
			if err := m.scan(sub, ptr+"/"+escapePointer(k), depth+1); err != nil {
				return err
			}
		}
	case []any:
		for i, sub := range x {
			if err := m.scan(sub, ptr+"/"+strconv.Itoa(i), depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

func orTop(ptr string) string {
	if ptr == "" {
		return "the top level"
	}
	return ptr
}

// resolve finds the target of a reference inside the document.
func (m *costMeter) resolve(ref, at string) (any, string, error) {
	frag, ok := strings.CutPrefix(ref, "#")
	if !ok {
		return nil, "", fmt.Errorf("at %s: $ref refers to the external document %q; only references inside the schema (\"#\", \"#/...\" or \"#anchor\") are supported", orTop(at), truncateRunes(ref, 80))
	}
	if frag != "" && !strings.HasPrefix(frag, "/") {
		ptr, ok := m.anchors[frag]
		if !ok {
			return nil, "", fmt.Errorf("is not a valid JSON Schema: at %s: $ref %q names no $anchor of the schema", orTop(at), truncateRunes(ref, 80))
		}
		frag = ptr
	}
	v := m.root
	if frag != "" {
		toks := strings.Split(frag[1:], "/")
		for i, tok := range toks {
			toks[i] = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		}
		if v = lookup(v, toks); v == nil {
			return nil, "", fmt.Errorf("is not a valid JSON Schema: at %s: $ref %q points to nothing", orTop(at), truncateRunes(ref, 80))
		}
	}
	return v, frag, nil
}

// refTarget returns the schema a node's $ref (or $dynamicRef, $recursiveRef) names, if any.
func (m *costMeter) refs(x map[string]any, ptr string) ([]any, []string, error) {
	var subs []any
	var ptrs []string
	for _, k := range []string{"$ref", "$dynamicRef", "$recursiveRef"} {
		ref, ok := x[k].(string)
		if !ok {
			continue
		}
		v, p, err := m.resolve(ref, ptr)
		if err != nil {
			return nil, nil, err
		}
		subs, ptrs = append(subs, v), append(ptrs, p)
	}
	return subs, ptrs, nil
}

// cost is what validation may visit for a value nested at most depth levels below this node:
// the node, its same-level subschemas and references at the same depth, its descending
// subschemas one level deeper.
func (m *costMeter) cost(v any, ptr string, depth int) (expanded, error) {
	if depth < 0 {
		return expanded{}, nil
	}
	x, ok := v.(map[string]any)
	if !ok {
		return expanded{nodes: 1}, nil // true, false, or a value the compiler will refuse
	}
	key := costKey{ptr, depth}
	if c, ok := m.memo[key]; ok {
		return c, nil
	}
	if m.visiting == nil {
		m.visiting = map[costKey]bool{}
	}
	if m.visiting[key] {
		return expanded{}, fmt.Errorf("at %s: $ref loops back without descending into the value (validation would never end)", orTop(ptr))
	}
	m.visiting[key] = true
	defer delete(m.visiting, key)

	total := expanded{nodes: 1}
	var err error
	add := func(sub any, subPtr string, d int) {
		if err != nil {
			return
		}
		var c expanded
		if c, err = m.cost(sub, subPtr, d); err == nil {
			total.add(c)
			err = total.check()
		}
	}
	subs, ptrs, rerr := m.refs(x, ptr)
	if rerr != nil {
		return expanded{}, rerr
	}
	for i := range subs {
		add(subs[i], ptrs[i], depth)
	}
	for _, k := range sameLevelOne {
		if sub, ok := x[k]; ok {
			add(sub, ptr+"/"+k, depth)
		}
	}
	for _, k := range sameLevelMany {
		arr, _ := x[k].([]any)
		total.add(expanded{branches: len(arr)})
		if err == nil {
			err = total.check()
		}
		for i, sub := range arr {
			add(sub, ptr+"/"+k+"/"+strconv.Itoa(i), depth)
		}
	}
	for _, k := range sameLevelMaps {
		mp, _ := x[k].(map[string]any)
		for name, sub := range mp {
			if _, isSchema := sub.(map[string]any); isSchema {
				add(sub, ptr+"/"+k+"/"+escapePointer(name), depth)
			}
		}
	}
	for _, k := range descendOne {
		if sub, ok := x[k]; ok {
			add(sub, ptr+"/"+k, depth-1)
		}
	}
	for _, k := range descendMaps {
		mp, _ := x[k].(map[string]any)
		for name, sub := range mp {
			add(sub, ptr+"/"+k+"/"+escapePointer(name), depth-1)
		}
	}
	for _, k := range []string{"items", "prefixItems"} {
		switch it := x[k].(type) {
		case []any:
			for i, sub := range it {
				add(sub, ptr+"/"+k+"/"+strconv.Itoa(i), depth-1)
			}
		case nil:
		default:
			add(it, ptr+"/"+k, depth-1)
		}
	}
	if err != nil {
		return expanded{}, err
	}
	m.memo[key] = total
	return total, nil
}

// nest is how many levels of objects and arrays the schema describes below v, following
// references but not recursion (a reference back to a schema on the current path counts 0).
func (m *costMeter) nest(v any, ptr string) int {
	x, ok := v.(map[string]any)
	if !ok {
		return 0
	}
	if n, ok := m.nestMemo[ptr]; ok {
		return n
	}
	if m.onPath == nil {
		m.onPath = map[string]bool{}
	}
	if m.onPath[ptr] {
		return 0
	}
	m.onPath[ptr] = true
	defer delete(m.onPath, ptr)

	best := 0
	same := func(sub any, subPtr string) { best = max(best, m.nest(sub, subPtr)) }
	down := func(sub any, subPtr string) { best = max(best, 1+m.nest(sub, subPtr)) }
	if subs, ptrs, err := m.refs(x, ptr); err == nil {
		for i := range subs {
			same(subs[i], ptrs[i])
		}
	}
	for _, k := range sameLevelOne {
		if sub, ok := x[k]; ok {
			same(sub, ptr+"/"+k)
		}
	}
	for _, k := range sameLevelMany {
		arr, _ := x[k].([]any)
		for i, sub := range arr {
			same(sub, ptr+"/"+k+"/"+strconv.Itoa(i))
		}
	}
	for _, k := range descendOne {
		if sub, ok := x[k]; ok {
			down(sub, ptr+"/"+k)
		}
	}
	for _, k := range descendMaps {
		mp, _ := x[k].(map[string]any)
		for name, sub := range mp {
			down(sub, ptr+"/"+k+"/"+escapePointer(name))
		}
	}
	for _, k := range []string{"items", "prefixItems"} {
		switch it := x[k].(type) {
		case []any:
			for i, sub := range it {
				down(sub, ptr+"/"+k+"/"+strconv.Itoa(i))
			}
		case nil:
		default:
			down(it, ptr+"/"+k)
		}
	}
	m.nestMemo[ptr] = best
	return best
}
