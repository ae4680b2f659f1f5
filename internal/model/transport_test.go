package model_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermes-agent/hermes/internal/model"
	"github.com/hermes-agent/hermes/internal/model/scripted"
)

// barrier holds each request until n are in flight, so every round of calls needs n
// connections at the same moment. It gives up after a while so that a broken client fails the
// test instead of hanging it.
type barrier struct {
	n int

	mu      sync.Mutex // guards arrived and release
	arrived int
	release chan struct{}
}

func newBarrier(n int) *barrier { return &barrier{n: n, release: make(chan struct{})} }

func (b *barrier) wait() {
	b.mu.Lock()
	ch := b.release
	b.arrived++
	if b.arrived == b.n {
		close(ch)
		b.arrived, b.release = 0, make(chan struct{})
	}
	b.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
	}
}

// TestConcurrentCallsReuseConnections runs rounds of n calls in flight at once, plain and
// streaming, through a client built without an HTTP client of its own (the process's shared
// pool): after the first round every call finds an idle connection, so the model endpoint
// accepts at most n connections in all. net/http's default pool keeps 2 idle connections per
// host and would dial n-2 anew each round.
func TestConcurrentCallsReuseConnections(t *testing.T) {
	const n, rounds = 16, 4
	b := newBarrier(n)
	c, srv := start(t, func(scripted.Request) scripted.Reply {
		b.wait()
		return scripted.Text("ok")
	}, model.Config{MaxRetries: -1})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for r := range rounds {
		errs := make(chan error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				req := model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: fmt.Sprintf("call %d.%d", r, i)}}}
				var err error
				if (r+i)%2 == 0 {
					_, err = c.Complete(ctx, req)
				} else {
					_, err = c.Stream(ctx, req, func(string) {})
				}
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", r, err)
			}
		}
	}
	// A connection goes back to the pool when its response body is read to the end, on the
	// transport's own goroutine, which may be a moment after the call returned: a call of the
	// next round can dial before one is back. One such dial per round is the most allowed
	// (net/http's default pool of 2 idle connections opened 58).
	if got, most := srv.Connections(), n+rounds; got > most {
		t.Errorf("%d rounds of %d concurrent calls opened %d connections, want at most %d", rounds, n, got, most)
	}
}

// dialCounted starts a model endpoint that answers with write, flushes, and sends the body's
// last chunk 5 ms later (when the handler returns: a packet of its own), and returns a client
// of it with the production transport and the count of connections the endpoint accepted.
func dialCounted(t *testing.T, write func(http.ResponseWriter)) (*model.Client, *atomic.Int32) {
	t.Helper()
	var dials atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		write(w)
		w.(http.Flusher).Flush()
		time.Sleep(5 * time.Millisecond) // the last chunk follows when the handler returns
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := model.New(model.Config{BaseURL: srv.URL + "/v1", Model: "m", MaxRetries: -1,
		HTTPClient: &http.Client{Transport: model.NewTransport(model.PoolOptions{})}})
	if err != nil {
		t.Fatal(err)
	}
	return c, &dials
}

// TestStreamKeepsConnectionAfterDone: a stream whose body ends a moment after [DONE] (the last
// chunk in a packet of its own) leaves its connection in the pool. The client stopped reading at
// [DONE] and closed the body before its end, which made net/http close the connection: every
// such call dialled anew.
func TestStreamKeepsConnectionAfterDone(t *testing.T) {
	c, dials := dialCounted(t, func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}`+"\n\n")
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	})
	const calls = 10
	for i := range calls {
		out, err := c.Stream(context.Background(), model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}}, nil)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if out.Content != "hi" {
			t.Fatalf("call %d: content %q, want %q", i, out.Content, "hi")
		}
	}
	// One connection serves them all; a second is allowed for a call that found the first not
	// yet back in the pool on a loaded machine (before: one per call).
	if n := dials.Load(); n > 2 {
		t.Errorf("%d sequential streams opened %d connections, want at most 2", calls, n)
	}
}

// TestCompleteKeepsConnectionAfterAChunkedAnswer: a whole answer sent chunked, its last chunk in
// a packet of its own, leaves its connection in the pool. The client stopped reading at the JSON
// value's end and closed the body before the last chunk: every call dialled anew (10 of 10).
func TestCompleteKeepsConnectionAfterAChunkedAnswer(t *testing.T) {
	c, dials := dialCounted(t, func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c","model":"m","choices":[{"index":0,"message":{"content":"hi"},"finish_reason":"stop"}]}`)
	})
	const calls = 10
	for i := range calls {
		out, err := c.Complete(context.Background(), model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}})
		if err != nil || out.Content != "hi" {
			t.Fatalf("call %d: %+v, %v", i, out, err)
		}
	}
	// As TestStreamKeepsConnectionAfterDone: a second connection is allowed on a loaded machine.
	if n := dials.Load(); n > 2 {
		t.Errorf("%d sequential calls opened %d connections, want at most 2", calls, n)
	}
}

func TestNewTransport(t *testing.T) {
	tests := []struct {
		opts                model.PoolOptions
		wantIdle, wantConns int
	}{
		{model.PoolOptions{}, model.DefaultMaxIdleConnsPerHost, 0},
		{model.PoolOptions{MaxIdleConnsPerHost: 8, MaxConnsPerHost: 64}, 8, 64},
	}
	for _, tt := range tests {
		tr := model.NewTransport(tt.opts)
		if tr.MaxIdleConnsPerHost != tt.wantIdle || tr.MaxConnsPerHost != tt.wantConns || !tr.ForceAttemptHTTP2 || tr.Proxy == nil {
			t.Errorf("NewTransport(%+v): idle %d, conns %d, http2 %v, proxy %v; want idle %d, conns %d, http2, proxy from the environment",
				tt.opts, tr.MaxIdleConnsPerHost, tr.MaxConnsPerHost, tr.ForceAttemptHTTP2, tr.Proxy != nil, tt.wantIdle, tt.wantConns)
		}
	}
	// Every idle connection keeps its write buffer: not one a long session's request fits.
	if n := model.NewTransport(model.PoolOptions{}).WriteBufferSize; n > 16<<10 {
		t.Errorf("NewTransport: write buffer %d bytes, want at most 16 KB", n)
	}
	if model.SharedHTTPClient() != model.SharedHTTPClient() {
		t.Error("SharedHTTPClient returned two clients; the process should have one pool")
	}
	if _, ok := model.SharedHTTPClient().Transport.(*http.Transport); !ok {
		t.Errorf("the shared client's transport is %T, want *http.Transport", model.SharedHTTPClient().Transport)
	}
}

// BenchmarkConcurrentComplete measures plain calls from many goroutines through the shared
// pool (run with -cpu to vary the parallelism); conns/op shows connections dialled per call.
func BenchmarkConcurrentComplete(b *testing.B) {
	srv, err := scripted.New(func(scripted.Request) scripted.Reply { return scripted.Text("ok") })
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	c, err := model.New(model.Config{BaseURL: srv.URL(), Model: "bench", MaxRetries: -1})
	if err != nil {
		b.Fatal(err)
	}
	req := model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hello"}}}
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Complete(context.Background(), req); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(srv.Connections())/float64(b.N), "conns/op")
}

// TestTransportSpeaksHTTP2OverTLS: against a TLS endpoint that offers HTTP/2 the transport
// negotiates it, so concurrent calls share one connection.
func TestTransportSpeaksHTTP2OverTLS(t *testing.T) {
	var (
		mu     sync.Mutex
		protos []string
	)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		protos = append(protos, r.Proto)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()

	tr := model.NewTransport(model.PoolOptions{})
	tr.TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	c, err := model.New(model.Config{BaseURL: srv.URL + "/v1", Model: "m", MaxRetries: -1, HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, err := c.Complete(context.Background(), model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for _, p := range protos {
		if p != "HTTP/2.0" {
			t.Fatalf("requests arrived as %v, want HTTP/2.0", protos)
		}
	}
	if len(protos) != 8 {
		t.Errorf("%d requests arrived, want 8", len(protos))
	}
}

// TestRequestBodyCopiedThroughPool: the part of a 30 KB chat request that does not fit the
// connection's write buffer goes through a pooled buffer; over a plain *net.TCPConn it was
// copied through a buffer of its size allocated for every call.
func TestRequestBodyCopiedThroughPool(t *testing.T) {
	if raceEnabled {
		// The request bodies the pool drops cost more than the write buffer saves: the
		// comparison failed in several of ten runs.
		t.Skip("allocations are not comparable under the race detector")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","model":"m","choices":[{"message":{"content":"ok"},"finish_reason":"stop"}]}`)
	}))
	defer srv.Close()
	req := model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: strings.Repeat("a long session's context. ", 1200)}}}
	// allocated is the bytes a call allocates, over calls made after a first that dialled.
	allocated := func(tr *http.Transport) uint64 {
		defer tr.CloseIdleConnections()
		c, err := model.New(model.Config{BaseURL: srv.URL, Model: "m", MaxRetries: -1, HTTPClient: &http.Client{Transport: tr}})
		if err != nil {
			t.Fatal(err)
		}
		call := func() {
			if _, err := c.Complete(context.Background(), req); err != nil {
				t.Fatal(err)
			}
		}
		call()
		const calls = 40
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range calls {
			call()
		}
		runtime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / calls
	}
	plain := model.NewTransport(model.PoolOptions{})
	plain.DialContext = (&net.Dialer{}).DialContext
	withPlain, with := allocated(plain), allocated(model.NewTransport(model.PoolOptions{}))
	t.Logf("a 30 KB request: %d bytes allocated a call, %d over plain TCP connections", with, withPlain)
	if with+12<<10 > withPlain {
		t.Errorf("a call allocates %d bytes, %d over plain TCP connections: want at least 12 KB less", with, withPlain)
	}
}
