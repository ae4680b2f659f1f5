package tools

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/tokenizer"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// maxCachedSchemas bounds the compiled-schema cache; past it the cache starts over (specs are
// few, so this only guards against churn).
const maxCachedSchemas = 4096

// Registry is the tool registry over a Store. Compiled schemas are cached by spec hash, so
// every replica compiles a spec lazily and once, whichever replica registered it.
type Registry struct {
	store      Store
	builtins   *Builtins
	tok        *tokenizer.Tokenizer
	maxTimeout time.Duration
	rules      specRules

	// mu guards the fields below; a lazySchema compiles outside it, under its own once.
	mu      sync.Mutex
	schemas map[string]*lazySchema
	listRev int64
	list    []*StoredTool
	listOK  bool
	// builtinTools holds the builtins as this replica registered them: no other source can
	// replace or delete a builtin's name, and this replica runs its own implementation, so Get
	// serves them without a store read (one per tool call).
	builtinTools map[string]*StoredTool
}

type lazySchema struct {
	once sync.Once
	cs   *compiledSpec
	err  error
}

// NewRegistry returns a registry over store.
func NewRegistry(store Store, builtins *Builtins, tok *tokenizer.Tokenizer, maxTimeout time.Duration, rules specRules) *Registry {
	return &Registry{store: store, builtins: builtins, tok: tok, maxTimeout: maxTimeout, rules: rules, schemas: map[string]*lazySchema{}, builtinTools: map[string]*StoredTool{}}
}

// Register validates, compiles and stores a spec. Invalid specs are an INVALID_ARGUMENT error
// naming every problem. A name registered by another source is replaced only with
// replaceOthers, and the builtins' names only by the builtins (*OwnedError).
func (r *Registry) Register(ctx context.Context, spec *toolsv1.ToolSpec, source string, replaceOthers bool) (*toolsv1.Tool, bool, error) {
	spec = proto.Clone(spec).(*toolsv1.ToolSpec)
	var v rpc.Violations
	cs := checkSpec(spec, r.builtins, r.maxTimeout, r.rules, &v)
	if source == "" {
		source = "api"
	}
	if !sourceValid(source) {
		v.Add("source", "%q must be api, file, builtin or mcp:<server>", truncateRunes(source, 80))
	}
	if err := v.Err(); err != nil {
		return nil, false, err
	}
	if _, builtin := r.builtins.get(spec.GetName()); builtin && source != SourceBuiltin {
		return nil, false, &OwnedError{Name: spec.GetName(), Source: SourceBuiltin}
	}
	hash := specHash(spec)
	r.remember(hash, cs)
	t := &toolsv1.Tool{Spec: spec, Source: source, SchemaTokens: schemaTokens(r.tok, spec)}
	stored, changed, err := r.store.PutTool(ctx, t, hash, time.Now(), replaceOthers)
	if err == nil && source == SourceBuiltin {
		r.mu.Lock()
		r.builtinTools[spec.GetName()] = &StoredTool{Tool: stored, Hash: hash}
		r.mu.Unlock()
	}
	return stored, changed, err
}

// remember caches a spec compiled at registration.
func (r *Registry) remember(hash string, cs *compiledSpec) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.schemas[hash]; ok {
		return
	}
	if len(r.schemas) >= maxCachedSchemas {
		r.schemas = map[string]*lazySchema{}
	}
	l := &lazySchema{cs: cs}
	l.once.Do(func() {})
	r.schemas[hash] = l
}

// compiled returns a stored spec's compiled schemas, compiling them on first use.
func (r *Registry) compiled(st *StoredTool) (*compiledSpec, error) {
	r.mu.Lock()
	l, ok := r.schemas[st.Hash]
	if !ok {
		if len(r.schemas) >= maxCachedSchemas {
			r.schemas = map[string]*lazySchema{}
		}
		l = &lazySchema{}
		r.schemas[st.Hash] = l
	}
	r.mu.Unlock()
	l.once.Do(func() {
		spec := st.Tool.GetSpec()
		in, err := compileSchema(spec.GetInputSchema(), true)
		if err != nil {
			l.err = fmt.Errorf("stored input schema of %s: %w", spec.GetName(), err)
			return
		}
		cs := &compiledSpec{input: in}
		if spec.GetOutputSchema() != "" {
			if cs.output, err = compileSchema(spec.GetOutputSchema(), false); err != nil {
				l.err = fmt.Errorf("stored output schema of %s: %w", spec.GetName(), err)
				return
			}
		}
		l.cs = cs
	})
	return l.cs, l.err
}

// sharedToolGetter is a store that can return a tool shared with other callers, which must not
// modify it.
type sharedToolGetter interface {
	getToolShared(ctx context.Context, name string) (*StoredTool, error)
}

// Get returns a tool and its compiled schemas, or ErrNotFound. The tool may be shared: callers
// only read it.
func (r *Registry) Get(ctx context.Context, name string) (*StoredTool, *compiledSpec, error) {
	r.mu.Lock()
	st, ok := r.builtinTools[name]
	r.mu.Unlock()
	if !ok {
		var err error
		if sg, shared := r.store.(sharedToolGetter); shared {
			st, err = sg.getToolShared(ctx, name)
		} else {
			st, err = r.store.GetTool(ctx, name)
		}
		if err != nil {
			return nil, nil, err
		}
	}
	cs, err := r.compiled(st)
	if err != nil {
		return nil, nil, err
	}
	return st, cs, nil
}

// Delete removes a tool, or returns ErrNotFound.
func (r *Registry) Delete(ctx context.Context, name, source string) error {
	if _, builtin := r.builtins.get(name); builtin {
		return &OwnedError{Name: name, Source: SourceBuiltin}
	}
	return r.store.DeleteTool(ctx, name, source)
}

// List returns every tool by name and the revision, reading the store only when the registry
// changed since the last call.
func (r *Registry) List(ctx context.Context) ([]*StoredTool, int64, error) {
	rev, err := r.store.Revision(ctx)
	if err != nil {
		return nil, 0, err
	}
	r.mu.Lock()
	if r.listOK && r.listRev == rev {
		list := r.list
		r.mu.Unlock()
		return list, rev, nil
	}
	r.mu.Unlock()
	list, rev, err := r.store.ListTools(ctx)
	if err != nil {
		return nil, 0, err
	}
	r.mu.Lock()
	r.list, r.listRev, r.listOK = list, rev, true
	r.mu.Unlock()
	return list, rev, nil
}
