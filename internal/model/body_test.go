package model_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/hermes-agent/hermes/internal/model"
)

// lateReader answers every request at once and reads the body of those marked "held" only
// when the test asks: an http.RoundTripper may read and close a request body after RoundTrip
// returned (a server that answers before it read the request, a proxy starting its event
// stream), and the answer may be a success.
type lateReader struct {
	mu   sync.Mutex
	held []io.ReadCloser
}

func (l *lateReader) RoundTrip(req *http.Request) (*http.Response, error) {
	head := make([]byte, 64)
	n, _ := io.ReadFull(req.Body, head)
	head = head[:n]
	rest := req.Body
	if bytes.Contains(head, []byte(`"held"`)) {
		l.mu.Lock()
		// Closed once read (readHeld), as a transport that is done with it would.
		l.held = append(l.held, readCloser{io.MultiReader(bytes.NewReader(head), rest), rest})
		l.mu.Unlock()
	} else {
		_, _ = io.Copy(io.Discard, rest)
		_ = rest.Close()
	}
	if strings.Contains(req.Header.Get("Accept"), "event-stream") {
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Request: req,
			Body: io.NopCloser(strings.NewReader("data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\n\ndata: [DONE]\n\n"))}, nil
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}, Request: req,
		Body: io.NopCloser(strings.NewReader(`{"id":"x","model":"m","choices":[{"message":{"content":"ok"},"finish_reason":"stop"}]}`))}, nil
}

type readCloser struct {
	io.Reader
	c io.Closer
}

func (r readCloser) Close() error { return r.c.Close() }

// readHeld reads and closes the bodies held back, in order.
func (l *lateReader) readHeld(t *testing.T) []string {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, b := range l.held {
		raw, err := io.ReadAll(b)
		if err != nil {
			t.Fatal(err)
		}
		_ = b.Close()
		var w struct {
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(raw, &w); err != nil || len(w.Messages) != 1 {
			out = append(out, "undecodable: "+string(raw[:min(len(raw), 80)]))
			continue
		}
		out = append(out, w.Messages[0].Content)
	}
	l.held = nil
	return out
}

// TestBodyNotReusedWhileTheTransportReadsIt: a request body goes back to the client's pool only
// once the transport closed it, not when the call returned: a successful call's body may still
// be read then, and the next call's request, written into the same buffer, was sent in its
// place (another user's context, on this one's connection).
func TestBodyNotReusedWhileTheTransportReadsIt(t *testing.T) {
	for _, stream := range []bool{false, true} {
		name := map[bool]string{false: "complete", true: "stream"}[stream]
		t.Run(name, func(t *testing.T) {
			tr := &lateReader{}
			c, err := model.New(model.Config{BaseURL: "http://model.invalid/v1", Model: "held", MaxRetries: -1, HTTPClient: &http.Client{Transport: tr}})
			if err != nil {
				t.Fatal(err)
			}
			call := func(m, content string) {
				req := model.Request{Model: m, Messages: []model.Message{{Role: model.RoleUser, Content: content}}}
				if stream {
					_, err = c.Stream(context.Background(), req, nil)
				} else {
					_, err = c.Complete(context.Background(), req)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			// The pool may drop what is put in it (always under the race detector, at times):
			// several rounds, each of which catches a body reused.
			for round := range 8 {
				mine := strings.Repeat("mine ", 200) + string(rune('a'+round))
				call("held", mine)
				call("other", strings.Repeat("other", 200)+string(rune('a'+round)))
				got := tr.readHeld(t)
				if len(got) != 1 || got[0] != mine {
					t.Fatalf("round %d: the held request's body as the transport read it: %.60q, want %.60q", round, got, mine)
				}
			}
		})
	}
}
