package mcpgateway

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

func TestSchemaDefaults(t *testing.T) {
	for _, tc := range []struct {
		name   string
		schema any
		want   map[string]any
		ok     bool
	}{
		{"all defaults", map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string", "default": "Jo"}, "n": map[string]any{"type": "integer", "default": 3}}}, map[string]any{"name": "Jo", "n": float64(3)}, true},
		{"a required field without a default", map[string]any{"properties": map[string]any{"a": map[string]any{"default": 1}, "b": map[string]any{}}, "required": []string{"b"}}, nil, false},
		{"optional field without a default is left out", map[string]any{"properties": map[string]any{"a": map[string]any{"default": true}, "b": map[string]any{}}, "required": []string{"a"}}, map[string]any{"a": true}, true},
		{"not a schema", "nonsense", nil, false},
	} {
		got, ok := schemaDefaults(tc.schema)
		if ok != tc.ok || !cmp.Equal(got, tc.want) {
			t.Errorf("%s: %v %v, want %v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestRateLimit(t *testing.T) {
	r := newRateLimit(2, 10)
	now := time.Unix(1000, 0)
	if !r.allow(now) || !r.allow(now.Add(time.Second)) {
		t.Fatal("the first two are refused")
	}
	if r.allow(now.Add(2 * time.Second)) {
		t.Error("a third within the minute is allowed")
	}
	if !r.allow(now.Add(61 * time.Second)) {
		t.Error("one a minute later is refused")
	}
	if newRateLimit(0, 10).perMinute != 10 {
		t.Error("0 does not mean the default")
	}
}

func TestProgressHub(t *testing.T) {
	h := newProgressHub()
	c, other := &serverConn{}, &serverConn{}
	var got []float64
	var told []string
	token, done := h.register(c, func(p *pb.Progress) {
		got = append(got, p.GetProgress())
		told = append(told, p.GetMessage())
	}, nil, false)
	h.deliver(c, token, 1, 3, "a")
	h.deliver(c, token, 0.5, 3, "backwards") // dropped: progress must increase
	h.deliver(c, "unknown", 2, 3, "")        // dropped: not a call's token
	h.deliver(c, 7, 2, 3, "")                // dropped: not a string token
	h.deliver(other, token, 2, 3, "spoofed") // dropped: another server's call
	h.deliver(c, token, 2, 3, "b")
	if !wasTold(h.tell(c, "asked", nil)) || wasTold(h.tell(other, "asked other", nil)) {
		t.Error("tell: the only call of c was not told, or a call of another server was")
	}
	// A second call of c in flight, which nobody waits for: a server's request could be
	// either's, so nobody is told.
	silent, quiet := h.register(c, nil, nil, false)
	if silent != "" {
		t.Errorf("a call nobody listens to got token %q", silent)
	}
	if wasTold(h.tell(c, "ambiguous", nil)) {
		t.Error("told a caller while two calls of the server were in flight")
	}
	quiet()
	done()
	h.deliver(c, token, 3, 3, "after the call") // dropped: the call ended
	if !cmp.Equal(got, []float64{1, 2, 2}) || !cmp.Equal(told, []string{"a", "b", "asked"}) {
		t.Errorf("delivered %v %q, want [1 2 2] [a b asked]", got, told)
	}
}

// TestElicitLimits: a server's form schema or URL over its limit is not shown to the caller;
// the request is declined instead.
func TestElicitLimits(t *testing.T) {
	g := New(testConfig(), Options{Logger: testLogger(t)})
	defer g.Close()
	c := &serverConn{g: g, spec: &pb.ServerSpec{Name: "big"}}
	var shown int
	_, done := g.progress.register(c, func(p *pb.Progress) {
		if p.GetElicitation() != nil {
			shown++
		}
	}, nil, false)
	defer done()
	props := map[string]any{}
	for i := range 2000 {
		props[fmt.Sprintf("field_%04d", i)] = map[string]any{"type": "string", "description": strings.Repeat("x", 10)}
	}
	for _, p := range []*mcp.ElicitParams{
		{Message: "a huge form", RequestedSchema: map[string]any{"type": "object", "properties": props}},
		{Message: "a huge URL", Mode: "url", URL: "https://example.com/?" + strings.Repeat("a", maxElicitURL)},
	} {
		if r, ok := g.elicits.ask(context.Background(), c, p, p.Message, time.Second); ok {
			t.Errorf("%s: asked, got %v; want declined", p.Message, r)
		}
	}
	if shown != 0 {
		t.Errorf("%d oversized requests reached the caller", shown)
	}
}

// TestElicitPendingLimit: a server cannot keep more than maxElicitPending requests waiting;
// the next is declined without reaching the caller.
func TestElicitPendingLimit(t *testing.T) {
	g := New(testConfig(), Options{Logger: testLogger(t)})
	defer g.Close()
	c := &serverConn{g: g, spec: &pb.ServerSpec{Name: "many"}}
	shown := make(chan string, 2*maxElicitPending)
	_, done := g.progress.register(c, func(p *pb.Progress) {
		if e := p.GetElicitation(); e != nil {
			shown <- e.GetId()
		}
	}, nil, false)
	defer done()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range maxElicitPending {
		wg.Go(func() { g.elicits.ask(ctx, c, &mcp.ElicitParams{Message: "q"}, "q", time.Minute) })
	}
	for range maxElicitPending {
		<-shown // each waiting request reached the caller
	}
	if r, ok := g.elicits.ask(ctx, c, &mcp.ElicitParams{Message: "one more"}, "one more", time.Minute); ok {
		t.Errorf("request %d: asked (%v), want declined", maxElicitPending+1, r)
	}
	cancel()
	wg.Wait()
	if _, ok := g.elicits.ask(context.Background(), c, &mcp.ElicitParams{Message: "later"}, "later", time.Millisecond); !ok {
		t.Error("once the others ended, a request was not asked")
	}
}

func wasTold(_ func(), _ <-chan struct{}, ok bool) bool { return ok }
