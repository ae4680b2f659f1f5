package model

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// answer is one scripted HTTP answer of an endpoint under test.
type answer struct {
	status  int
	headers map[string]string
	body    string
}

// answering serves the answers in order (the last one again when they run out) and counts the
// requests.
func answering(t *testing.T, answers ...answer) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		a := answers[min(int(n.Add(1))-1, len(answers)-1)]
		for k, v := range a.headers {
			w.Header().Set(k, v)
		}
		if w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, a.body)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func TestEndpointRetries(t *testing.T) {
	ok := answer{status: 200, body: `{"v":1}`}
	fast := map[string]string{"Retry-After-Ms": "1"}
	tests := []struct {
		name       string
		answers    []answer
		wantStatus int
		wantMsg    string
		wantCalls  int32
	}{
		{"503 then success", []answer{{status: 503, headers: fast}, ok}, 0, "", 2},
		{"408 and 409 are retried", []answer{{status: 408, headers: fast}, {status: 409, headers: fast}, ok}, 0, "", 3},
		{"x-should-retry true wins over a 400", []answer{{status: 400, headers: map[string]string{"x-should-retry": "true", "Retry-After-Ms": "1"}}, ok}, 0, "", 2},
		{"x-should-retry false wins over a 503", []answer{{status: 503, headers: map[string]string{"x-should-retry": "false"}, body: `{"error":{"message":"no"}}`}, ok}, 503, "no", 1},
		{"Retry-After in seconds", []answer{{status: 429, headers: map[string]string{"Retry-After": "0.001"}}, ok}, 0, "", 2},
		{"Retry-After as a date in the past", []answer{{status: 429, headers: map[string]string{"Retry-After": time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)}}, ok}, 0, "", 2},
		{
			"a wait over a minute returns the answer",
			[]answer{{status: 429, headers: map[string]string{"Retry-After": "3600"}, body: `{"error":{"message":"quota"}}`}, ok},
			429, "quota", 1,
		},
		{
			"retries run out",
			[]answer{{status: 502, headers: fast, body: `{"error":"bad gateway"}`}},
			502, "bad gateway", 3,
		},
		{
			"an error object without a message",
			[]answer{{status: 400, body: `{"error":{"code":"x"}}`}},
			400, `{"code":"x"}`, 1,
		},
		{
			"an answer that is not JSON",
			[]answer{{status: 401, headers: map[string]string{"Content-Type": "text/html"}, body: "<h1>denied</h1>"}},
			401, "<h1>denied</h1>", 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, calls := answering(t, tc.answers...)
			e := NewEndpoint(Config{BaseURL: srv.URL + "/v1/"})
			var got struct{ V int }
			_, err := e.PostJSON(context.Background(), "x", []byte(`{}`), &got)
			if tc.wantStatus == 0 {
				if err != nil || got.V != 1 {
					t.Fatalf("PostJSON = %v, %+v; want the success", err, got)
				}
			} else {
				var apiErr *APIError
				if !errors.As(err, &apiErr) || apiErr.StatusCode != tc.wantStatus || apiErr.Message != tc.wantMsg {
					t.Fatalf("PostJSON error = %#v, want status %d message %q", err, tc.wantStatus, tc.wantMsg)
				}
			}
			if n := calls.Load(); n != tc.wantCalls {
				t.Errorf("%d requests, want %d", n, tc.wantCalls)
			}
		})
	}
}

// TestEndpointCancelledWhileWaiting: a caller that gives up during the pause before a retry is
// answered at once, without the retry.
func TestEndpointCancelledWhileWaiting(t *testing.T) {
	srv, calls := answering(t, answer{status: 503, headers: map[string]string{"Retry-After": "30"}})
	e := NewEndpoint(Config{BaseURL: srv.URL})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := e.PostJSON(ctx, "x", []byte(`{}`), new(any))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want the context's", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("returned after %s, want soon after the context ended", d)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

func TestEvents(t *testing.T) {
	tests := []struct {
		name    string
		stream  string
		want    []string
		wantErr string
	}{
		{"data lines joined", "event: x\ndata: a\ndata:b\n\n: comment\n\ndata: c\n\n", []string{"a\nb\n", "c\n"}, ""},
		{"an event without its blank line is dropped", "data: a\n\ndata: b\n", []string{"a\n"}, ""},
		{"CRLF lines", "data: a\r\n\r\n", []string{"a\n"}, ""},
		{"a line over the limit", "data: " + strings.Repeat("x", maxEventLine+1) + "\n\n", nil, "over"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev := newEvents(io.NopCloser(strings.NewReader(tc.stream)), nil)
			var got []string
			for ev.Next() {
				got = append(got, string(ev.Data()))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if err := ev.Err(); (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("Err() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestConnectionsReused: calls one after another share one connection, streamed or not (an
// answer's body is read to its end, so the transport can keep the connection).
func TestConnectionsReused(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get("Accept") == "text/event-stream" {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "data: [DONE]\n\n")
			w.(http.Flusher).Flush()
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c","choices":[{"message":{"content":"ok"},"finish_reason":"stop"}]}`+"\n")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := New(Config{BaseURL: srv.URL, Model: "m", HTTPClient: &http.Client{Transport: NewTransport(PoolOptions{})}})
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Messages: []Message{{Role: RoleUser, Content: "hi"}}}
	for i := range 20 {
		var out *Response
		if i%2 == 0 {
			out, err = c.Stream(context.Background(), req, nil)
		} else {
			out, err = c.Complete(context.Background(), req)
		}
		if err != nil || out.Content != "ok" {
			t.Fatalf("call %d: %+v, %v", i, out, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("20 calls one after another opened %d connections, want 1", n)
	}
}

// TestErrorMessageIsValidUTF8: an error answer's message goes into proto strings (TurnFailed),
// whose encoding fails on invalid UTF-8, so neither the cut of a long body nor a body that is
// not UTF-8 may leave any.
func TestErrorMessageIsValidUTF8(t *testing.T) {
	tests := []struct {
		name string
		body string
	}{
		{"cut inside a character", strings.Repeat("a", 511) + strings.Repeat("é", 100)},
		{"cut inside an emoji", strings.Repeat("a", 510) + strings.Repeat("😀", 100)},
		{"a Latin-1 page", "<h1>Zugriff verweigert f\xfcr Benutzer</h1>"},
		{"an error object with a bad string", `{"error":{"code":"caf\xe9"}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if msg := errorMessage([]byte(tc.body)); !utf8.ValidString(msg) || msg == "" {
				t.Errorf("errorMessage = %q, want a non-empty valid UTF-8 text", msg)
			}
		})
	}
}

// TestEndpointRetriesPastAStalledErrorBody: an answer to be retried whose body stalls (a proxy's
// 503 that never ends) does not hold up the retry: without a per-attempt timeout, reading it
// for the connection's sake waited as long as the caller's context.
func TestEndpointRetriesPastAStalledErrorBody(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After-Ms", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":`)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		_, _ = io.WriteString(w, `{"v":1}`)
	}))
	t.Cleanup(srv.Close)
	e := NewEndpoint(Config{BaseURL: srv.URL})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got struct{ V int }
	if _, err := e.PostJSON(ctx, "x", []byte(`{}`), &got); err != nil || got.V != 1 {
		t.Fatalf("PostJSON = %v, %+v; want the retry's success", err, got)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
}
