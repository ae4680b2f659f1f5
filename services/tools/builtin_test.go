package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

func TestEvaluate(t *testing.T) {
	tests := []struct {
		expr    string
		want    float64
		wantErr string
	}{
		{expr: "1 + 2 * 3", want: 7},
		{expr: "(1 + 2) * 3", want: 9},
		{expr: "2 ^ 3 ^ 2", want: 512},
		{expr: "2 ** 10", want: 1024},
		{expr: "-2 ^ 2", want: -4},
		{expr: "(-2) ^ 2", want: 4},
		{expr: "10 / 4", want: 2.5},
		{expr: "10 % 4", want: 2},
		{expr: "--3", want: 3},
		{expr: "1.5e3 + .5", want: 1500.5},
		{expr: "1_000 * 3", want: 3000},
		{expr: "sqrt(16) + abs(-2)", want: 6},
		{expr: "max(1, 7, 3) - min(4, 2)", want: 5},
		{expr: "round(2.345, 2)", want: 2.35},
		{expr: "round(2.5)", want: 3},
		{expr: "floor(-1.5) + ceil(1.2)", want: 0},
		{expr: "pi", want: math.Pi},
		{expr: "2 × 3 ÷ 4", want: 1.5},
		{expr: "12.5 * 4 + 3", want: 53},
		{expr: "1 / 0", wantErr: "division by zero at position 3"},
		{expr: "5 % 0", wantErr: "remainder by zero"},
		{expr: "sqrt(-1)", wantErr: "not a finite number"},
		{expr: "10 ^ 400", wantErr: "not a finite number"},
		{expr: "", wantErr: "empty"},
		{expr: "1 +", wantErr: "ends too early"},
		{expr: "(1 + 2", wantErr: "missing ')'"},
		{expr: "1 2", wantErr: `unexpected "2" at position 3`},
		{expr: "foo(1)", wantErr: `unknown name "foo"`},
		{expr: "sqrt 4", wantErr: "needs its arguments in parentheses"},
		{expr: "max()", wantErr: "takes 1 to 64 arguments"},
		{expr: `__import__("os")`, wantErr: "unexpected character"},
		{expr: "os.exit(1)", wantErr: "not a number"},
		{expr: "1.2.3", wantErr: "not a number"},
		{expr: strings.Repeat("(", 70) + "1" + strings.Repeat(")", 70), wantErr: "nests deeper"},
		{expr: strings.Repeat("-", 70) + "1", wantErr: "nests deeper"},
		{expr: strings.Repeat("1+", 600) + "1", wantErr: "at most 1000"},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			got, err := Evaluate(tt.expr)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Evaluate(%q) = %v, %v; want error containing %q", tt.expr, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || math.Abs(got-tt.want) > 1e-12 {
				t.Fatalf("Evaluate(%q) = %v, %v; want %v", tt.expr, got, err, tt.want)
			}
		})
	}
}

func TestBuiltinsThroughGRPC(t *testing.T) {
	c, svc := newClient(t, Options{})
	if err := svc.RegisterBuiltins(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Registering again at the next start-up changes nothing.
	if err := svc.RegisterBuiltins(context.Background()); err != nil {
		t.Fatal(err)
	}
	list, err := c.ListTools(ctxTimeout(t, 5*time.Second), &toolsv1.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names, readOnly []string
	for _, tl := range list.GetTools() {
		names = append(names, tl.GetSpec().GetName())
		// A read-only builtin may run before its turn's record is on disk (the orchestrator)
		// and be retried (this service); http_fetch reaches other hosts and is not one.
		if tl.GetSpec().GetAnnotations().GetReadOnlyHint() {
			readOnly = append(readOnly, tl.GetSpec().GetName())
		}
		if tl.GetSource() != "builtin" || tl.GetVersion() != 1 || tl.GetSchemaTokens() == 0 {
			t.Errorf("%s: source %s version %d tokens %d", tl.GetSpec().GetName(), tl.GetSource(), tl.GetVersion(), tl.GetSchemaTokens())
		}
	}
	if diff := cmp.Diff([]string{"calculator", "current_time", "http_fetch"}, names); diff != "" {
		t.Errorf("builtins (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"calculator", "current_time"}, readOnly); diff != "" {
		t.Errorf("read-only builtins (-want +got):\n%s", diff)
	}

	res := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "calculator", Arguments: `{"expression":"(12.5 * 4 + 3) / 2"}`})
	if !res.GetSuccess() || res.GetOutput() != `{"expression":"(12.5 * 4 + 3) / 2","result":26.5}` {
		t.Errorf("calculator: %v", res)
	}
	res = execute(t, c, &toolsv1.ExecuteToolRequest{Name: "calculator", Arguments: `{"expression":"1/0"}`})
	if res.GetError().GetCode() != toolsv1.ErrorCode_ERROR_CODE_EXECUTION || !strings.Contains(res.GetError().GetMessage(), "division by zero") {
		t.Errorf("calculator 1/0: %v", res)
	}
	res = execute(t, c, &toolsv1.ExecuteToolRequest{Name: "calculator", Arguments: `{"expr":"1"}`})
	if res.GetError().GetCode() != toolsv1.ErrorCode_ERROR_CODE_VALIDATION || len(res.GetError().GetViolations()) != 2 {
		t.Errorf("calculator with a wrong field: %v", res.GetError())
	}

	// A pure builtin runs again under the same idempotency key (nothing was recorded); an
	// impure idempotent one replays its recorded result.
	for _, tc := range []struct {
		name, args   string
		wantReplayed bool
	}{
		{"calculator", `{"expression":"6*7"}`, false},
		{"current_time", `{"timezone":"UTC"}`, true},
	} {
		req := &toolsv1.ExecuteToolRequest{Name: tc.name, Arguments: tc.args, IdempotencyKey: "k-" + tc.name}
		first, second := execute(t, c, req), execute(t, c, req)
		if !first.GetSuccess() || first.GetReplayed() || !second.GetSuccess() || second.GetReplayed() != tc.wantReplayed {
			t.Errorf("%s twice with one key: %v then %v, want replayed %v the second time", tc.name, first, second, tc.wantReplayed)
		}
	}

	res = execute(t, c, &toolsv1.ExecuteToolRequest{Name: "current_time", Arguments: `{"timezone":"Asia/Shanghai"}`})
	var out currentTimeOutput
	if !res.GetSuccess() || json.Unmarshal([]byte(res.GetOutput()), &out) != nil || out.UTCOffset != "+08:00" || out.Timezone != "Asia/Shanghai" {
		t.Errorf("current_time: %v", res)
	}
	res = execute(t, c, &toolsv1.ExecuteToolRequest{Name: "current_time", Arguments: `{"timezone":"Mars/Olympus"}`})
	if res.GetError().GetCode() != toolsv1.ErrorCode_ERROR_CODE_EXECUTION || !strings.Contains(res.GetError().GetMessage(), "unknown time zone") {
		t.Errorf("current_time with a bad zone: %v", res)
	}
}

func TestCurrentTime(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 30, 0, 0, time.UTC)
	bt := currentTimeAt(func() time.Time { return at })
	tests := []struct {
		args string
		want currentTimeOutput
	}{
		{`{}`, currentTimeOutput{Time: "2026-03-01T12:30:00Z", Date: "2026-03-01", Weekday: "Sunday", Timezone: "UTC", UTCOffset: "+00:00", Unix: at.Unix()}},
		{`{"timezone":"America/New_York"}`, currentTimeOutput{Time: "2026-03-01T07:30:00-05:00", Date: "2026-03-01", Weekday: "Sunday", Timezone: "America/New_York", UTCOffset: "-05:00", Unix: at.Unix()}},
		{`{"timezone":"Pacific/Kiritimati"}`, currentTimeOutput{Time: "2026-03-02T02:30:00+14:00", Date: "2026-03-02", Weekday: "Monday", Timezone: "Pacific/Kiritimati", UTCOffset: "+14:00", Unix: at.Unix()}},
	}
	for _, tt := range tests {
		got, err := bt.Run(context.Background(), json.RawMessage(tt.args))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.args, diff)
		}
	}
	if _, err := bt.Run(context.Background(), json.RawMessage(`{"timezone":"Local"}`)); err == nil {
		t.Error("the server's local zone leaked through")
	}
}

func TestHTTPFetch(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/page", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, "hello from the allowed host")
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, strings.Repeat("é", 100))
	})
	mux.HandleFunc("/image", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write([]byte{0x89, 'P', 'N', 'G', 0, 1, 2})
	})
	mux.HandleFunc("/away", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://evil.invalid/steal", http.StatusFound)
	})
	mux.HandleFunc("/flaky", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "x", 503) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	u, _ := url.Parse(srv.URL)

	f := newFetcher([]string{u.Host, "*.example.org"}, 51, testEgress(t).Transport())
	ctx := context.Background()

	out, err := f.fetch(ctx, srv.URL+"/page")
	if err != nil || out.Body != "hello from the allowed host" || out.Status != 200 {
		t.Errorf("page: %+v %v", out, err)
	}
	out, err = f.fetch(ctx, srv.URL+"/big")
	if err != nil || !out.Truncated || len(out.Body) != 50 || !strings.HasSuffix(out.Body, "é") {
		t.Errorf("big: %+v %v", out, err)
	}
	out, err = f.fetch(ctx, srv.URL+"/image")
	if err != nil || out.Body != "" || !strings.Contains(out.Note, "binary content (image/png)") {
		t.Errorf("image: %+v %v", out, err)
	}
	for _, bad := range []struct{ url, want string }{
		{"http://localhost.evil.invalid/", "not on the allow-list"},
		{"http://example.org/", "not on the allow-list"},
		{"file:///etc/passwd", "not an absolute http or https URL"},
		{srv.URL + "/away", "not on the allow-list"},
	} {
		if _, err := f.fetch(ctx, bad.url); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want %q", bad.url, err, bad.want)
		}
	}
	if !f.allowed(&url.URL{Host: "api.example.org"}) || f.allowed(&url.URL{Host: "example.org.evil.invalid"}) {
		t.Error("wildcard matching is wrong")
	}
	if _, err := f.fetch(ctx, srv.URL+"/flaky"); err == nil {
		t.Error("503 succeeded")
	} else if _, ok := err.(*transientError); !ok {
		t.Errorf("503 is not transient: %T %v", err, err)
	}
	if _, err := newFetcher(nil, 10, testEgress(t).Transport()).fetch(ctx, srv.URL+"/page"); err == nil || !strings.Contains(err.Error(), "--tools.fetch-allow") {
		t.Errorf("empty allow-list: %v", err)
	}
}

func TestBuiltinPanicIsAResult(t *testing.T) {
	b := NewBuiltins(testConfig(), testEgress(t))
	b.Add(&Builtin{
		Spec: spec("boom", "A builtin with a bug.", emptyObjectSchema, time.Second, true),
		Run:  func(context.Context, json.RawMessage) (any, error) { panic("index out of range") },
	})
	c, svc := newClient(t, Options{Builtins: b})
	if err := svc.RegisterBuiltins(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		res := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "boom", Arguments: `{}`, IdempotencyKey: "k"})
		if res.GetError().GetCode() != toolsv1.ErrorCode_ERROR_CODE_EXECUTION || !strings.Contains(res.GetError().GetMessage(), "index out of range") {
			t.Fatalf("result %v", res)
		}
	}
}

// countingStore counts the registry reads of one tool.
type countingStore struct {
	Store
	gets atomic.Int64
}

func (s *countingStore) GetTool(ctx context.Context, name string) (*StoredTool, error) {
	s.gets.Add(1)
	return s.Store.GetTool(ctx, name)
}

// TestBuiltinCallsReadNoStore: a builtin's call is served from the registration this replica
// made (nothing can replace a builtin's name), without a store read; other tools still read it.
func TestBuiltinCallsReadNoStore(t *testing.T) {
	store := &countingStore{Store: testBoltStore(t)}
	svc := newTestService(t, store, Options{})
	if err := svc.RegisterBuiltins(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := serve(t, svc)
	for range 3 {
		if res := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "calculator", Arguments: `{"expression":"2*3"}`}); !res.GetSuccess() {
			t.Fatalf("calculator: %v", res)
		}
	}
	if n := store.gets.Load(); n != 0 {
		t.Errorf("3 calculator calls read the store %d times, want none", n)
	}
	execute(t, c, &toolsv1.ExecuteToolRequest{Name: "no_such_tool", Arguments: `{}`})
	if n := store.gets.Load(); n != 1 {
		t.Errorf("a call of an unknown tool read the store %d times, want 1", n)
	}
}

// TestBuiltinSchemasDerived pins the schemas the builtins derive from their argument structs to
// the bytes they registered when the schemas were written by hand: a builtin whose schema bytes
// change gets a new version in every store at the next start-up, so a change here must be meant.
func TestBuiltinSchemasDerived(t *testing.T) {
	want := map[string]string{
		"current_time": `{"type":"object","properties":{"timezone":{"type":"string","description":"IANA time zone name, for example \"Europe/Paris\", \"America/New_York\" or \"Asia/Shanghai\"; default \"UTC\"","maxLength":64}},"additionalProperties":false}`,
		"calculator":   `{"type":"object","properties":{"expression":{"type":"string","description":"Arithmetic expression, for example \"(12.5 * 4 + 3) / 2\" or \"sqrt(2) ^ 2\". Operators: + - * / % ^ and parentheses; functions: abs, sqrt, cbrt, exp, ln, log10, log2, sin, cos, tan, floor, ceil, round, min, max, pow; constants: pi, e.","minLength":1,"maxLength":1000}},"required":["expression"],"additionalProperties":false}`,
		"http_fetch":   `{"type":"object","properties":{"url":{"type":"string","description":"The http or https URL to GET. Only hosts on the operator's allow-list can be fetched.","minLength":1,"maxLength":2048}},"required":["url"],"additionalProperties":false}`,
	}
	b := NewBuiltins(testConfig(), testEgress(t))
	got := map[string]string{}
	for _, name := range b.names() {
		bt, _ := b.get(name)
		got[name] = bt.Spec.GetInputSchema()
		if _, err := compileSchema(got[name], true); err != nil {
			t.Errorf("%s: the derived schema does not compile: %v", name, err)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("builtin input schemas (-want +got):\n%s", diff)
	}
}

func TestMustArgsSchemaRefusesABadBound(t *testing.T) {
	type args struct {
		N int    `json:"n"`
		S string `json:"s,omitempty"`
	}
	for _, prop := range []string{"missing", "n"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("a bound on %q was accepted", prop)
				}
			}()
			mustArgsSchema[args](map[string]lengths{prop: {max: 1}})
		}()
	}
	if got, want := mustArgsSchema[args](map[string]lengths{"s": {max: 3}}), `{"type":"object","properties":{"n":{"type":"integer"},"s":{"type":"string","maxLength":3}},"required":["n"],"additionalProperties":false}`; got != want {
		t.Errorf("schema %s, want %s", got, want)
	}
}
