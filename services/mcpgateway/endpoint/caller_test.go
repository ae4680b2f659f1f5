package endpoint

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hermes-agent/hermes/internal/testenv"
)

// TestSessionsPerCallerConcurrent: initialize requests sent at once cannot each pass the
// per-caller count, or the endpoint's, before any of their sessions is recorded. Each request's
// body is held until every request has either had its session created (the SDK creates it
// before it reads the body) or been refused, so without a place reserved before the session is
// created all of them would pass.
func TestSessionsPerCallerConcurrent(t *testing.T) {
	const max, tries = 2, 6
	for _, tc := range []struct {
		name    string
		cfg     Config
		caller  func(i int) *Caller // nil: a request without a caller (keys off)
		refusal int
	}{
		{"one caller over its cap", Config{MaxSessionsPerCaller: max}, func(int) *Caller {
			return &Caller{Principal: "user:alice", User: "alice"}
		}, http.StatusTooManyRequests},
		{"callers over the endpoint's cap", Config{MaxSessions: max}, func(i int) *Caller {
			return &Caller{Principal: "operator:ops", User: fmt.Sprintf("user-%d", i)}
		}, http.StatusServiceUnavailable},
		{"callers without keys over the endpoint's cap", Config{MaxSessions: max}, func(int) *Caller { return nil }, http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(Options{
				Tools:  func() (ToolClient, error) { return nil, errors.New("no tool service in this test") },
				Logger: testenv.Logger(t),
				Config: tc.cfg,
			})
			if err != nil {
				t.Fatal(err)
			}
			var refused, n atomic.Int64
			h := s.HTTPHandler()
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if c := tc.caller(int(n.Add(1))); c != nil {
					r = r.WithContext(WithCaller(r.Context(), *c))
				}
				h.ServeHTTP(&statusWatch{ResponseWriter: w, refused: &refused}, r)
			}))
			defer ts.Close()
			release := make(chan struct{})
			var once sync.Once
			open := func() { once.Do(func() { close(release) }) }
			defer open()

			var mu sync.Mutex
			got := map[int]int{} // HTTP status → requests
			var wg sync.WaitGroup
			for range tries {
				wg.Add(1)
				go func() {
					defer wg.Done()
					body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"probe","version":"1"}}}`
					req, _ := http.NewRequest(http.MethodPost, ts.URL, &heldReader{r: strings.NewReader(body), release: release})
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Accept", "application/json, text/event-stream")
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					_ = resp.Body.Close()
					mu.Lock()
					got[resp.StatusCode]++
					mu.Unlock()
				}()
			}
			testenv.WaitFor(t, 30*time.Second, "every initialize with a session or refused", func() bool {
				return int64(s.sessionCount())+refused.Load() == tries
			})
			open()
			wg.Wait()
			want := map[int]int{http.StatusOK: max, tc.refusal: tries - max}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("HTTP status → requests (-want +got):\n%s", d)
			}
		})
	}
}

// heldReader is a request body that gives nothing until release is closed.
type heldReader struct {
	r       io.Reader
	release chan struct{}
}

func (h *heldReader) Read(p []byte) (int, error) {
	<-h.release
	return h.r.Read(p)
}

// statusWatch counts the 429 and 503 answers.
type statusWatch struct {
	http.ResponseWriter
	refused *atomic.Int64
}

func (w *statusWatch) WriteHeader(code int) {
	if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
		w.refused.Add(1)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWatch) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// TestElicitationsPerSession: a session that is sent a URL elicitation again and again for one
// user and server holds one entry, its latest, so it cannot push the other users' pending
// elicitations out of the bounded list (they would never be told of their completion).
func TestElicitationsPerSession(t *testing.T) {
	var e elicitations
	exp := time.Now().Add(time.Hour)
	e.add(pendingElicitation{user: "bob", server: "docs", sessionID: "s-bob", id: "bob-1", expires: exp})
	for i := range maxPendingElicitations + 5 {
		e.add(pendingElicitation{user: "alice", server: "docs", sessionID: "s-alice", id: fmt.Sprint("alice-", i), expires: exp})
	}
	e.add(pendingElicitation{user: "alice", server: "docs", sessionID: "s-alice-2", id: "alice-other-session", expires: exp})
	ids := func(ps []pendingElicitation) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.id)
		}
		return out
	}
	if d := cmp.Diff([]string{"bob-1"}, ids(e.take("bob", "docs"))); d != "" {
		t.Errorf("bob's elicitations (-want +got):\n%s", d)
	}
	want := []string{fmt.Sprint("alice-", maxPendingElicitations+4), "alice-other-session"}
	if d := cmp.Diff(want, ids(e.take("alice", "docs"))); d != "" {
		t.Errorf("alice's elicitations (-want +got):\n%s", d)
	}
}
