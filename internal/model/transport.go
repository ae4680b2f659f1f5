package model

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// DefaultMaxIdleConnsPerHost is how many idle connections the shared transport keeps to one
// model endpoint. net/http keeps 2, so every call beyond the second in flight at once dialled a
// new connection and closed it afterwards (hundreds of sockets in TIME_WAIT at concurrency 8, and
// a TLS handshake per extra call against a real endpoint). 256 covers the concurrency a process
// runs turns at, with extraction and summaries on top.
const DefaultMaxIdleConnsPerHost = 256

// PoolOptions size a model HTTP transport.
type PoolOptions struct {
	// MaxIdleConnsPerHost is the number of idle connections kept per endpoint; 0 means
	// DefaultMaxIdleConnsPerHost.
	MaxIdleConnsPerHost int
	// MaxConnsPerHost caps connections per endpoint, idle or busy (further calls wait for
	// one); 0 means no cap.
	MaxConnsPerHost int
}

// NewTransport returns a transport for model endpoints: http.DefaultTransport's settings
// (proxy from the environment, dial and TLS handshake timeouts, keep-alives) with a pool sized
// for concurrent calls and HTTP/2 where a TLS endpoint offers it (one connection then carries
// every call in flight). No response-header timeout: a model may think for minutes before its
// first byte; Config.Timeout and the caller's context bound an attempt.
func NewTransport(o PoolOptions) *http.Transport {
	idle := o.MaxIdleConnsPerHost
	if idle <= 0 {
		idle = DefaultMaxIdleConnsPerHost
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = 10 * time.Second
	t.ForceAttemptHTTP2 = true
	t.MaxIdleConnsPerHost = idle
	// The model, extraction and embedding endpoints may be distinct hosts; each keeps its pool.
	t.MaxIdleConns = 4 * idle
	t.MaxConnsPerHost = o.MaxConnsPerHost
	t.IdleConnTimeout = 90 * time.Second
	t.ExpectContinueTimeout = time.Second
	// A request body is copied into the connection's write buffer whole when it fits: with
	// net/http's 4 KB, the rest of a 10–30 KB chat request went through net's generic copy,
	// which allocated a buffer of its size for every call.
	t.WriteBufferSize = requestBufferSize
	return t
}

// requestBufferSize is the write buffer of a model connection: a long session's chat request
// fits, and the buffer lives as long as its connection.
const requestBufferSize = 32 << 10

// sharedClient is the process's one pool of model connections, as http.DefaultClient is for
// net/http: every Client built without Config.HTTPClient (the chat model, the extraction model,
// the MCP sampler) and the memory service's embedder share it, so connections to one endpoint
// are reused across them rather than dialled per component.
var sharedClient = sync.OnceValue(func() *http.Client {
	return &http.Client{Transport: NewTransport(PoolOptions{})}
})

// SharedHTTPClient returns the process-wide HTTP client for model endpoints, the one Clients use
// when Config.HTTPClient is nil. Other callers of OpenAI-compatible endpoints (embeddings) use
// it to share the pool.
func SharedHTTPClient() *http.Client { return sharedClient() }
