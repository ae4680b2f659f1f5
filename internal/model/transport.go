package model

import (
	"context"
	"io"
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
	dial := (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return bodyCopyConn{c}, nil
	}
	t.TLSHandshakeTimeout = 10 * time.Second
	t.ForceAttemptHTTP2 = true
	t.MaxIdleConnsPerHost = idle
	// The model, extraction and embedding endpoints may be distinct hosts; each keeps its pool.
	t.MaxIdleConns = 4 * idle
	t.MaxConnsPerHost = o.MaxConnsPerHost
	t.IdleConnTimeout = 90 * time.Second
	t.ExpectContinueTimeout = time.Second
	// A request that fits the write buffer goes out in one write; the part of a longer one
	// that does not fit goes through bodyCopyConn.ReadFrom, a second write. The buffer lives as
	// long as its connection, and a process at 64 turns at once keeps 70–90 of them: 16 KB
	// holds a short session's request, not a long one's (10–30 KB).
	t.WriteBufferSize = requestBufferSize
	return t
}

// requestBufferSize is the write buffer of a model connection.
const requestBufferSize = 16 << 10

// bodyCopyConn is a plain model connection whose ReadFrom copies a request body through a
// pooled buffer. net/http's connection writer hands the part of a body that does not fit its
// write buffer to the connection's ReadFrom, and *net.TCPConn's (no splice or sendfile for a
// body in memory) copied it through a buffer of its size allocated for every call. Behind TLS
// the tls.Conn sits above this one and writes through Write.
type bodyCopyConn struct{ net.Conn }

// copyBufs holds the buffers bodyCopyConn copies through: a chat request of a long session
// (10–30 KB) goes in one write.
var copyBufs = sync.Pool{New: func() any { return new([32 << 10]byte) }}

// ReadFrom implements io.ReaderFrom.
func (c bodyCopyConn) ReadFrom(r io.Reader) (int64, error) {
	buf := copyBufs.Get().(*[32 << 10]byte)
	defer copyBufs.Put(buf)
	// The connection is wrapped so that io.CopyBuffer does not call TCPConn.ReadFrom (and
	// its allocating copy) again.
	return io.CopyBuffer(struct{ io.Writer }{c.Conn}, r, buf[:])
}

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
