package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/hermes-agent/hermes/internal/egress"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// Builtin is a Go tool compiled into Hermes. Its spec (name, description, input schema) is the
// registered contract, and Run receives arguments that already passed the schema. The standard
// builtins derive the schema from their argument struct (newBuiltin), so the two cannot drift.
type Builtin struct {
	Spec *toolsv1.ToolSpec
	Run  func(ctx context.Context, args json.RawMessage) (any, error)
	// Pure says the same arguments always give the same result and the call changes nothing:
	// running it again is cheaper than a durable record of its idempotency key, so none is kept.
	Pure bool
}

// Builtins is the set of Go tools a process offers, by name.
type Builtins struct {
	m map[string]*Builtin
}

// NewBuiltins returns the standard builtins: current_time, calculator and http_fetch (limited to
// cfg.FetchAllow, and connecting through the egress policy; nil refuses internal addresses).
func NewBuiltins(cfg Config, eg *egress.Policy) *Builtins {
	cfg = cfg.withDefaults()
	if eg == nil {
		eg = &egress.Policy{}
	}
	b := &Builtins{m: map[string]*Builtin{}}
	b.Add(currentTimeBuiltin())
	b.Add(calculatorBuiltin())
	b.Add(httpFetchBuiltin(newFetcher(splitList(cfg.FetchAllow), cfg.FetchMaxBytes, eg.Transport())))
	return b
}

// Add registers a builtin (replacing one of the same name). Its spec gets a builtin executor
// of its own name.
func (b *Builtins) Add(bt *Builtin) {
	bt.Spec.Executor = &toolsv1.ToolSpec_Builtin{Builtin: &toolsv1.BuiltinExecutor{Name: bt.Spec.GetName()}}
	b.m[bt.Spec.GetName()] = bt
}

func (b *Builtins) get(name string) (*Builtin, bool) {
	if b == nil {
		return nil, false
	}
	bt, ok := b.m[name]
	return bt, ok
}

// pure reports whether spec is a pure builtin of b.
func (b *Builtins) pure(spec *toolsv1.ToolSpec) bool {
	bi := spec.GetBuiltin()
	if bi == nil {
		return false
	}
	bt, ok := b.get(bi.GetName())
	return ok && bt.Pure
}

func (b *Builtins) names() []string {
	if b == nil {
		return nil
	}
	out := make([]string, 0, len(b.m))
	for n := range b.m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// toolFailure is a tool's own failure, with a message for the model; it is never retried.
type toolFailure struct{ msg string }

func (e *toolFailure) Error() string { return e.msg }

func failf(format string, args ...any) error { return &toolFailure{fmt.Sprintf(format, args...)} }

// transientError marks a failure worth retrying (a network fault).
type transientError struct{ err error }

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }

// builtinExecutor runs builtins in process.
type builtinExecutor struct {
	builtins *Builtins
}

func (x *builtinExecutor) attempt(ctx context.Context, c *call) (out []byte, err error) {
	name := c.tool.GetSpec().GetBuiltin().GetName()
	// A builtin's bug is that call's failure, not the process's: it must not leave an
	// idempotency key pending or take the service down.
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, &execError{code: toolsv1.ErrorCode_ERROR_CODE_EXECUTION, msg: fmt.Sprintf("the builtin %s failed internally (%v)", name, r)}
		}
	}()
	return x.run(ctx, name, c)
}

func (x *builtinExecutor) run(ctx context.Context, name string, c *call) ([]byte, error) {
	bt, ok := x.builtins.get(name)
	if !ok {
		return nil, &execError{code: toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE, msg: fmt.Sprintf("the builtin %q is not compiled into this Hermes process", name)}
	}
	out, err := bt.Run(ctx, c.args)
	if err != nil {
		var tf *toolFailure
		var te *transientError
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.As(err, &te):
			return nil, &execError{code: toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE, transient: true, msg: err.Error()}
		case errors.As(err, &tf):
			return nil, &execError{code: toolsv1.ErrorCode_ERROR_CODE_EXECUTION, msg: tf.msg}
		default:
			return nil, &execError{code: toolsv1.ErrorCode_ERROR_CODE_EXECUTION, msg: err.Error()}
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, &execError{code: toolsv1.ErrorCode_ERROR_CODE_EXECUTION, msg: "the builtin returned output that is not JSON: " + err.Error()}
	}
	return b, nil
}

// decodeArgs unmarshals validated arguments into a struct.
func decodeArgs(args json.RawMessage, v any) error {
	if len(args) == 0 {
		return nil
	}
	if err := json.Unmarshal(args, v); err != nil {
		return failf("arguments: %v", err)
	}
	return nil
}

// derivedSchema is the schema argument of spec for a builtin made by newBuiltin, which fills it
// in from the argument type.
const derivedSchema = ""

// lengths bounds a string property's length in runes, which a struct tag cannot say; 0 is no
// lower bound.
type lengths struct{ min, max int }

// newBuiltin makes a builtin whose input schema and argument decoding come from one Go type, as
// adk-go's functiontool does: T's exported fields by their json names are the properties, fields
// without omitempty are required, a `jsonschema:"..."` tag is the property's description,
// additionalProperties is false, and bounds adds string lengths by property name. It sets
// sp.InputSchema; a bound on a property T lacks is a programming error and panics at start-up
// (as regexp.MustCompile does), which every test that builds the builtins catches.
func newBuiltin[T any](sp *toolsv1.ToolSpec, bounds map[string]lengths, run func(ctx context.Context, in T) (any, error)) *Builtin {
	sp.InputSchema = mustArgsSchema[T](bounds)
	return &Builtin{
		Spec: sp,
		Run: func(ctx context.Context, args json.RawMessage) (any, error) {
			var in T
			if err := decodeArgs(args, &in); err != nil {
				return nil, err
			}
			return run(ctx, in)
		},
	}
}

// mustArgsSchema derives the compact JSON input schema of the argument struct T (see newBuiltin).
func mustArgsSchema[T any](bounds map[string]lengths) string {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("builtin arguments %T: %v", *new(T), err))
	}
	for name, b := range bounds {
		p := s.Properties[name]
		if p == nil || p.Type != "string" {
			panic(fmt.Sprintf("builtin arguments %T: no string property %q to bound", *new(T), name))
		}
		if b.min > 0 {
			p.MinLength = jsonschema.Ptr(b.min)
		}
		p.MaxLength = jsonschema.Ptr(b.max)
	}
	out, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("builtin arguments %T: %v", *new(T), err))
	}
	return string(out)
}

func spec(name, description, schema string, timeout time.Duration, idempotent bool, groups ...string) *toolsv1.ToolSpec {
	return &toolsv1.ToolSpec{
		Name:        name,
		Description: description,
		InputSchema: schema,
		Timeout:     durationpb.New(timeout),
		Idempotent:  idempotent,
		Groups:      groups,
	}
}

// readOnly is the annotations of a builtin that changes nothing outside Hermes: the tool service
// may retry it, and the orchestrator runs it before the turn's record is on disk.
func readOnly() *toolsv1.ToolAnnotations {
	return &toolsv1.ToolAnnotations{ReadOnlyHint: proto.Bool(true), DestructiveHint: proto.Bool(false), OpenWorldHint: proto.Bool(false)}
}

// httpNoRedirect is an http.Client option: a webhook's redirect is its answer, not followed,
// since following it would re-send the arguments to another URL.
func httpNoRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
