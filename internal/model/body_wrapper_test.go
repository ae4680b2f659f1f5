package model

import (
	"bytes"
	"context"
	"io"
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

// TestBodyReleasedOnce: a call's body, sent twice (the first answer asks for a retry), goes
// back to the pool once, and only when no copy of it is read any more: the released function
// here overwrites it, as the next call encoding into the pooled buffer would, and the endpoint
// must have received every attempt's body whole. Behind an http.RoundTripper that is not
// net/http's Transport, WroteRequest need not come once per copy of the body handed over
// (httputil.DumpRequestOut writes each request once more): the body was counted free while
// the call's retry still read it, and went back to the pool twice (two later calls encoding
// into one buffer).
func TestBodyReleasedOnce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		wrap   func(http.RoundTripper) http.RoundTripper
		h2     bool
		pooled bool
	}{
		{"net/http", func(rt http.RoundTripper) http.RoundTripper { return rt }, false, true},
		{"net/http h2", func(rt http.RoundTripper) http.RoundTripper { return rt }, true, true},
		{"dumping", func(rt http.RoundTripper) http.RoundTripper { return &dumpingTransport{base: rt} }, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 100) + `"}]}`
			var n atomic.Int32
			var proto atomic.Value
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				proto.Store(r.Proto)
				got, _ := io.ReadAll(r.Body)
				if string(got) != want {
					http.Error(w, "a body not the call's: "+string(got), http.StatusBadRequest)
					return
				}
				if n.Add(1) == 1 {
					w.Header().Set("Retry-After-Ms", "0")
					http.Error(w, `{"error":{"message":"busy"}}`, http.StatusServiceUnavailable)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"ok":true}`))
			}))
			tr := NewTransport(PoolOptions{})
			if tc.h2 {
				srv.EnableHTTP2 = true
				srv.StartTLS()
				tr.TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
			} else {
				srv.Start()
			}
			defer srv.Close()
			defer tr.CloseIdleConnections()
			ep := NewEndpoint(Config{BaseURL: srv.URL, MaxRetries: 1, HTTPClient: &http.Client{Transport: tc.wrap(tr)}})

			body := []byte(want)
			released := make(chan struct{}, 4)
			var dst struct{ OK bool }
			attempts, err := ep.postJSON(context.Background(), "chat", body, &dst, func() {
				copy(body, bytes.Repeat([]byte("Z"), len(body)))
				released <- struct{}{}
			})
			if err != nil || attempts != 2 || !dst.OK {
				t.Fatalf("postJSON: %d attempts, %v, %+v", attempts, err, dst)
			}
			if proto := proto.Load(); tc.h2 != (proto == "HTTP/2.0") {
				t.Fatalf("the requests went as %s", proto)
			}
			if tc.pooled {
				// The transport may finish writing a copy just after the call returned.
				<-released
			}
			tr.CloseIdleConnections()
			srv.Close()
			if len(released) > 0 {
				t.Errorf("the body was released %d more times", len(released))
			}
		})
	}
}
