package model

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// dumpingTransport logs each request as it will be sent (httputil.DumpRequestOut, a common
// debugging wrapper): the dump writes the request through a transport of its own, with the
// request's context, and then the base transport writes the copy the dump left in its place.
type dumpingTransport struct {
	base  http.RoundTripper
	mu    sync.Mutex
	dumps []string
}

func (d *dumpingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	dump, err := httputil.DumpRequestOut(r, true)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.dumps = append(d.dumps, string(dump))
	d.mu.Unlock()
	return d.base.RoundTrip(r)
}

// TestBodyReleasedOnceBehindAnotherRoundTripper: behind an http.RoundTripper that is not
// net/http's Transport, WroteRequest need not come once per copy of the body handed over (the
// dump above writes each request twice): the body was counted free while the call still ran,
// the retry read it from a buffer the pool may have given another call, and it went back to
// the pool twice (two later calls encoding into one buffer).
func TestBodyReleasedOnceBehindAnotherRoundTripper(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("Retry-After-Ms", "0")
			http.Error(w, `{"error":{"message":"busy"}}`, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	dt := &dumpingTransport{base: base}
	ep := NewEndpoint(Config{BaseURL: srv.URL, MaxRetries: 1, HTTPClient: &http.Client{Transport: dt}})

	var (
		mu       sync.Mutex
		inCall   = true
		released int
		early    bool
	)
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 100) + `"}]}`)
	var dst struct{ OK bool }
	attempts, err := ep.postJSON(context.Background(), "chat", body, &dst, func() {
		mu.Lock()
		defer mu.Unlock()
		released++
		early = early || inCall
	})
	mu.Lock()
	inCall = false
	mu.Unlock()
	if err != nil || attempts != 2 || !dst.OK {
		t.Fatalf("postJSON: %d attempts, %v, %+v", attempts, err, dst)
	}
	base.CloseIdleConnections()
	mu.Lock()
	defer mu.Unlock()
	if released > 1 || early {
		t.Errorf("the body was released %d times, during the call: %v; want at most once, after it", released, early)
	}
}
