package tools

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/secretenv"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// hangingServer never answers; it reports each request's context ending, which is how the test
// knows the tool service cancelled the call instead of abandoning it.
func hangingServer(t *testing.T) (*httptest.Server, chan struct{}, *atomic.Int64) {
	cancelled := make(chan struct{}, 16)
	var hits atomic.Int64
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		// net/http notices a closed connection only once the body is read.
		_, _ = io.ReadAll(r.Body)
		select {
		case <-r.Context().Done():
			select {
			case cancelled <- struct{}{}:
			default:
			}
		case <-stop:
		}
	}))
	t.Cleanup(func() { close(stop); srv.Close() })
	return srv, cancelled, &hits
}

func TestHangingWebhookTimesOut(t *testing.T) {
	srv, cancelled, hits := hangingServer(t)
	c, _ := newClient(t, Options{})
	spec := httpSpec("slow_tool", srv.URL, emptyObjectSchema)
	spec.Timeout = dur(300 * time.Millisecond)
	mustRegister(t, c, spec)

	res := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "slow_tool", Arguments: `{}`})
	if res.GetSuccess() || res.GetError().GetCode() != toolsv1.ErrorCode_ERROR_CODE_TIMEOUT {
		t.Fatalf("result %v, want a timeout", res)
	}
	if !strings.Contains(res.GetError().GetMessage(), "did not finish within its timeout of 300ms") {
		t.Errorf("message: %s", res.GetError().GetMessage())
	}
	// A timed-out attempt is final when no attempt timeout is set: one request, cancelled.
	if res.GetAttempts() != 1 || hits.Load() != 1 {
		t.Errorf("attempts %d, requests %d; want 1 and 1", res.GetAttempts(), hits.Load())
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the webhook request was not cancelled at the deadline")
	}
	// Reported duration covers the whole call and it ended at the deadline, not later.
	if d := res.GetDuration().AsDuration(); d < 300*time.Millisecond {
		t.Errorf("duration %v is shorter than the timeout", d)
	}
}

func TestCallerDeadlineCapsTimeout(t *testing.T) {
	srv, cancelled, _ := hangingServer(t)
	c, _ := newClient(t, Options{})
	spec := httpSpec("slow_tool", srv.URL, emptyObjectSchema)
	spec.Timeout = dur(time.Minute)
	mustRegister(t, c, spec)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := c.ExecuteTool(ctx, &toolsv1.ExecuteToolRequest{Name: "slow_tool", Arguments: `{}`})
	if err != nil {
		t.Fatalf("the caller got an error instead of a timeout result before its deadline: %v", err)
	}
	res := resp.GetResult()
	if res.GetError().GetCode() != toolsv1.ErrorCode_ERROR_CODE_TIMEOUT || !strings.Contains(res.GetError().GetMessage(), "the caller's deadline") {
		t.Errorf("result %v, want a timeout at the caller's deadline", res.GetError())
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the webhook request was not cancelled at the caller's deadline")
	}
}

func TestRetriesTransientFailures(t *testing.T) {
	tests := []struct {
		name        string
		handler     func(n int64, w http.ResponseWriter)
		maxRetries  *int32
		wantSuccess bool
		wantCode    toolsv1.ErrorCode
		wantAttempt int32
		wantMsg     string
	}{
		{
			name: "fails twice then succeeds",
			handler: func(n int64, w http.ResponseWriter) {
				if n <= 2 {
					http.Error(w, "warming up", http.StatusServiceUnavailable)
					return
				}
				fmt.Fprint(w, `{"ok":true}`)
			},
			wantSuccess: true, wantAttempt: 3,
		},
		{
			name: "500 forever",
			handler: func(n int64, w http.ResponseWriter) {
				http.Error(w, "database is on fire", http.StatusInternalServerError)
			},
			wantCode: toolsv1.ErrorCode_ERROR_CODE_EXECUTION, wantAttempt: 3,
			wantMsg: "HTTP 500: database is on fire (3 attempts)",
		},
		{
			name:     "429 is retried",
			handler:  func(n int64, w http.ResponseWriter) { http.Error(w, "slow down", http.StatusTooManyRequests) },
			wantCode: toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE, wantAttempt: 3,
		},
		{
			name:     "400 is not retried",
			handler:  func(n int64, w http.ResponseWriter) { http.Error(w, "city unknown", http.StatusBadRequest) },
			wantCode: toolsv1.ErrorCode_ERROR_CODE_EXECUTION, wantAttempt: 1,
			wantMsg: "HTTP 400: city unknown",
		},
		{
			name:       "no retries when max_retries is 0",
			handler:    func(n int64, w http.ResponseWriter) { http.Error(w, "x", http.StatusBadGateway) },
			maxRetries: i32(0),
			wantCode:   toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE, wantAttempt: 1,
		},
		{
			name:       "max_retries 4",
			handler:    func(n int64, w http.ResponseWriter) { http.Error(w, "x", http.StatusBadGateway) },
			maxRetries: i32(4),
			wantCode:   toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE, wantAttempt: 5,
		},
		{
			name:        "text output becomes a JSON string",
			handler:     func(n int64, w http.ResponseWriter) { fmt.Fprint(w, "sunny, 21°C") },
			wantSuccess: true, wantAttempt: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hits atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tt.handler(hits.Add(1), w)
			}))
			defer srv.Close()
			c, _ := newClient(t, Options{})
			spec := httpSpec("flaky", srv.URL, emptyObjectSchema)
			spec.MaxRetries = tt.maxRetries
			mustRegister(t, c, spec)
			res := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "flaky", Arguments: `{}`})
			if res.GetSuccess() != tt.wantSuccess || res.GetError().GetCode() != tt.wantCode || res.GetAttempts() != tt.wantAttempt {
				t.Fatalf("success=%v code=%v attempts=%d (%s); want %v %v %d", res.GetSuccess(), res.GetError().GetCode(), res.GetAttempts(),
					res.GetError().GetMessage(), tt.wantSuccess, tt.wantCode, tt.wantAttempt)
			}
			if int64(res.GetAttempts()) != hits.Load() {
				t.Errorf("attempts %d but the endpoint saw %d requests", res.GetAttempts(), hits.Load())
			}
			if tt.wantMsg != "" && !strings.Contains(res.GetError().GetMessage(), tt.wantMsg) {
				t.Errorf("message %q lacks %q", res.GetError().GetMessage(), tt.wantMsg)
			}
			if res.GetMayHaveRun() {
				t.Error("may_have_run set although no attempt timed out")
			}
		})
	}
}

func TestConnectionRefusedIsUnavailable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	c, _ := newClient(t, Options{})
	mustRegister(t, c, httpSpec("gone", "http://"+addr+"/x", emptyObjectSchema))
	res := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "gone", Arguments: `{}`})
	if res.GetError().GetCode() != toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE || res.GetAttempts() != 3 {
		t.Errorf("code %v attempts %d (%s), want unavailable after 3 attempts", res.GetError().GetCode(), res.GetAttempts(), res.GetError().GetMessage())
	}
}

func TestRetryNeverPassesDeadline(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Retry-After", "30")
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	c, _ := newClient(t, Options{})
	spec := httpSpec("busy", srv.URL, emptyObjectSchema)
	spec.Timeout = dur(2 * time.Second)
	mustRegister(t, c, spec)
	res := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "busy", Arguments: `{}`})
	// The server asks for 30 s, more than the 2 s budget: no retry is made.
	if res.GetAttempts() != 1 || hits.Load() != 1 || !strings.Contains(res.GetError().GetMessage(), "no time was left") {
		t.Errorf("attempts %d, requests %d, message %q", res.GetAttempts(), hits.Load(), res.GetError().GetMessage())
	}
}

func TestAttemptTimeoutRetriesAndFlagsMayHaveRun(t *testing.T) {
	for _, idempotent := range []bool{false, true} {
		t.Run(fmt.Sprintf("idempotent=%v", idempotent), func(t *testing.T) {
			var hits atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body)
				if hits.Add(1) == 1 {
					<-r.Context().Done() // the first attempt hangs until cancelled
					return
				}
				fmt.Fprint(w, `{"charged":true}`)
			}))
			defer srv.Close()
			c, _ := newClient(t, Options{})
			spec := httpSpec("charge", srv.URL, emptyObjectSchema)
			spec.Timeout, spec.AttemptTimeout, spec.Idempotent = dur(5*time.Second), dur(200*time.Millisecond), idempotent
			mustRegister(t, c, spec)
			res := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "charge", Arguments: `{}`})
			if !res.GetSuccess() || res.GetAttempts() != 2 {
				t.Fatalf("success=%v attempts=%d (%v), want success on attempt 2", res.GetSuccess(), res.GetAttempts(), res.GetError())
			}
			if res.GetMayHaveRun() == idempotent {
				t.Errorf("may_have_run=%v for idempotent=%v; want it set only for non-idempotent tools", res.GetMayHaveRun(), idempotent)
			}
		})
	}
}

func TestWebhookRequest(t *testing.T) {
	got := make(chan *http.Request, 1)
	var body string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		body = string(b)
		got <- r
		fmt.Fprint(w, `{"temp": 21}`)
	}))
	defer srv.Close()
	env := map[string]string{"WEATHER_TOKEN": "s3cret"}
	c, _ := newClient(t, Options{Secrets: secretenv.New([]string{"WEATHER_TOKEN"}, func(k string) string { return env[k] })})
	spec := httpSpec("weather", srv.URL, `{"type":"object","properties":{"city":{"type":"string"}}}`)
	spec.GetHttp().Headers = map[string]string{"X-Region": "eu"}
	spec.GetHttp().SecretEnv = "WEATHER_TOKEN"
	spec.Idempotent = true
	mustRegister(t, c, spec)
	res := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "weather", Arguments: `{"city": "Paris"}`, CallId: "call_1", SessionId: "s1", UserId: "u1", IdempotencyKey: "k1"})
	if !res.GetSuccess() || res.GetOutput() != `{"temp":21}` {
		t.Fatalf("result %v", res)
	}
	r := <-got
	checks := map[string]string{
		"Content-Type":        "application/json",
		"Authorization":       "Bearer s3cret",
		"X-Region":            "eu",
		"X-Hermes-Call-Id":    "call_1",
		"X-Hermes-Session-Id": "s1",
		"X-Hermes-User-Id":    "u1",
		"Idempotency-Key":     "k1",
		"X-Hermes-Tool":       "weather",
	}
	for k, want := range checks {
		if v := r.Header.Get(k); v != want {
			t.Errorf("header %s = %q, want %q", k, v, want)
		}
	}
	if r.Method != http.MethodPost || body != `{"city": "Paris"}` {
		t.Errorf("%s %q", r.Method, body)
	}
	// The secret is never stored: the registered spec names only the variable.
	gt, err := c.GetTool(ctxTimeout(t, 5*time.Second), &toolsv1.GetToolRequest{Name: "weather"})
	if err != nil || strings.Contains(gt.String(), "s3cret") {
		t.Errorf("GetTool leaks the secret or failed: %v", err)
	}

	// A custom secret header carries the raw secret; a missing variable is "unavailable".
	spec.GetHttp().SecretHeader = "X-Api-Key"
	mustRegister(t, c, spec)
	execute(t, c, &toolsv1.ExecuteToolRequest{Name: "weather", Arguments: `{}`})
	if r := <-got; r.Header.Get("X-Api-Key") != "s3cret" || r.Header.Get("Authorization") != "" {
		t.Errorf("custom secret header: %q / %q", r.Header.Get("X-Api-Key"), r.Header.Get("Authorization"))
	}
	delete(env, "WEATHER_TOKEN")
	res = execute(t, c, &toolsv1.ExecuteToolRequest{Name: "weather", Arguments: `{}`})
	if res.GetError().GetCode() != toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE || !strings.Contains(res.GetError().GetMessage(), "WEATHER_TOKEN is not set") {
		t.Errorf("missing secret: %v", res.GetError())
	}
}

func TestOutputTruncated(t *testing.T) {
	big := strings.Repeat("0123456789", 5000) // 50,000 bytes
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, big) }))
	defer srv.Close()
	cfg := testConfig()
	cfg.MaxOutputBytes = 1000
	c := serve(t, newConfiguredService(t, cfg, testBoltStore(t), Options{}))
	mustRegister(t, c, httpSpec("big", srv.URL, emptyObjectSchema))
	res := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "big", Arguments: `{}`})
	if !res.GetSuccess() || !res.GetTruncated() || len(res.GetOutput()) > 1000 {
		t.Fatalf("success=%v truncated=%v len=%d", res.GetSuccess(), res.GetTruncated(), len(res.GetOutput()))
	}
	if res.GetOutputBytes() != int64(len(big))+2 { // the output is a JSON string: quotes included
		t.Errorf("output_bytes %d", res.GetOutputBytes())
	}
	if !strings.Contains(res.GetOutput(), "[output truncated: showing the first") || !strings.Contains(res.GetOutput(), "of 50000 bytes") {
		t.Errorf("no truncation note: …%s", res.GetOutput()[len(res.GetOutput())-120:])
	}

	// A caller that passes large output on asks for more, up to the webhook response limit.
	for _, tc := range []struct {
		max       int32
		truncated bool
		maxLen    int
	}{{60000, false, len(big) + 2}, {20000, true, 20000}, {1 << 30, false, len(big) + 2}} {
		res := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "big", Arguments: `{}`, MaxOutputBytes: tc.max})
		if !res.GetSuccess() || res.GetTruncated() != tc.truncated || len(res.GetOutput()) > tc.maxLen || (!tc.truncated && len(res.GetOutput()) != len(big)+2) {
			t.Errorf("max_output_bytes %d: success=%v truncated=%v len=%d", tc.max, res.GetSuccess(), res.GetTruncated(), len(res.GetOutput()))
		}
	}
	cfg.MaxResponseBytes = 30000
	c = serve(t, newConfiguredService(t, cfg, testBoltStore(t), Options{}))
	mustRegister(t, c, httpSpec("big", srv.URL, emptyObjectSchema))
	if res := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "big", Arguments: `{}`, MaxOutputBytes: 1 << 20}); res.GetSuccess() {
		t.Errorf("a response over tools.max-response-bytes succeeded with max_output_bytes: truncated=%v len=%d", res.GetTruncated(), len(res.GetOutput()))
	}
}

func TestOutputSchemaChecked(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"temp":"warm"}`) }))
	defer srv.Close()
	c, _ := newClient(t, Options{})
	spec := httpSpec("typed", srv.URL, emptyObjectSchema)
	spec.OutputSchema = `{"type":"object","properties":{"temp":{"type":"number"}},"required":["temp"]}`
	mustRegister(t, c, spec)
	res := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "typed", Arguments: `{}`})
	if res.GetSuccess() || res.GetError().GetCode() != toolsv1.ErrorCode_ERROR_CODE_EXECUTION || !strings.Contains(res.GetError().GetMessage(), "/temp: got string") {
		t.Errorf("result %v", res.GetError())
	}
}

func TestUnknownToolSuggestsNames(t *testing.T) {
	c, _ := newClient(t, Options{})
	for _, n := range []string{"get_weather", "get_forecast", "send_email", "book_flight"} {
		mustRegister(t, c, httpSpec(n, "http://127.0.0.1:1/", emptyObjectSchema))
	}
	res := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "get_wether", Arguments: `{}`})
	if res.GetError().GetCode() != toolsv1.ErrorCode_ERROR_CODE_UNKNOWN_TOOL {
		t.Fatalf("code %v", res.GetError().GetCode())
	}
	if msg := res.GetError().GetMessage(); !strings.Contains(msg, "closest registered tools are: get_weather, get_forecast") {
		t.Errorf("message %q", msg)
	}
	_, err := c.GetTool(ctxTimeout(t, 5*time.Second), &toolsv1.GetToolRequest{Name: "weather"})
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "get_weather") {
		t.Errorf("GetTool: %v", err)
	}
}

// TestNoGoroutineLeak runs hanging, retried and cancelled calls and checks that the goroutine
// count returns to where it was: executors' requests end with their calls.
func TestNoGoroutineLeak(t *testing.T) {
	srv, _, _ := hangingServer(t)
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "x", 503) }))
	defer flaky.Close()
	svc := newTestService(t, testBoltStore(t), Options{})
	ctx := context.Background()
	for _, spec := range []*toolsv1.ToolSpec{httpSpec("hang", srv.URL, emptyObjectSchema), httpSpec("flaky", flaky.URL, emptyObjectSchema)} {
		spec.Timeout = dur(100 * time.Millisecond)
		if _, _, err := svc.reg.Register(ctx, spec, "api", true); err != nil {
			t.Fatal(err)
		}
	}
	run := func() {
		for range 5 {
			_, _ = svc.execute(ctx, &toolsv1.ExecuteToolRequest{Name: "hang", Arguments: `{}`})
			_, _ = svc.execute(ctx, &toolsv1.ExecuteToolRequest{Name: "flaky", Arguments: `{}`})
			cctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(20*time.Millisecond, cancel)
			_, _ = svc.execute(cctx, &toolsv1.ExecuteToolRequest{Name: "hang", Arguments: `{}`})
		}
	}
	run() // warm up pools (HTTP keep-alive connections are reused, not leaked)
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	base := settledGoroutines()
	run()
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	// A leak grows by a goroutine per call (15 calls a run); a few of slack absorb the
	// keep-alive connections of the service's own transport, opened again after a cancel.
	if n := settledGoroutines(); n > base+4 {
		buf := make([]byte, 1<<16)
		t.Errorf("goroutines grew from %d to %d:\n%s", base, n, buf[:runtime.Stack(buf, true)])
	}
}

// settledGoroutines waits for exiting goroutines to finish before counting.
func settledGoroutines() int {
	n := runtime.NumGoroutine()
	for range 50 {
		time.Sleep(20 * time.Millisecond)
		m := runtime.NumGoroutine()
		if m == n {
			return m
		}
		n = m
	}
	return n
}
