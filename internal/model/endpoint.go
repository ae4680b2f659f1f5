package model

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hermes-agent/hermes/internal/backoff"
)

// Endpoint sends requests to an OpenAI-compatible HTTP API: auth, a timeout per attempt, and
// retries with back-off on 408, 409, 429, 5xx and connection failures, honouring Retry-After-Ms,
// Retry-After and x-should-retry, as the official SDKs do. Client uses it for Chat Completions,
// the memory service's embedder for embeddings.
//
// It replaced openai-go as the transport: Hermes already encoded and decoded the bodies itself,
// and the SDK's client (every service of the OpenAI API, kept whole by reflection) was 52 MB of
// the 138 MB binary, 12 MiB of resident memory, and its per-request option handling a measurable
// share of a turn's CPU.
type Endpoint struct {
	base    string // as configured, for messages
	url     string // base, ending in "/"
	key     string
	retries int
	timeout time.Duration
	hc      *http.Client
	// traced: hc's transport is net/http's, whose WroteRequest trace comes once for each copy
	// of a request body it wrote (see post).
	traced bool
}

// retryBackoff is the pause between attempts when the endpoint names none: 0.5 s doubling to
// 8 s, less up to a quarter (the SDKs' schedule).
var retryBackoff = backoff.Policy{Initial: 500 * time.Millisecond, Max: 8 * time.Second, Jitter: 0.25}

// maxRetryAfter is the longest pause an endpoint may ask for; one that asks for more gets its
// answer returned instead of a retry.
const maxRetryAfter = 60 * time.Second

const (
	// maxErrorBody bounds how much of an error answer is read for its message.
	maxErrorBody = 1 << 20
	// maxEventLine bounds one line of a streamed answer.
	maxEventLine = 4 << 20
)

// NewEndpoint returns the endpoint of cfg (its Model is not used). MaxRetries 0 means
// defaultMaxRetries, a negative value none; a nil HTTPClient means SharedHTTPClient.
func NewEndpoint(cfg Config) *Endpoint {
	retries := cfg.MaxRetries
	switch {
	case retries == 0:
		retries = defaultMaxRetries
	case retries < 0:
		retries = 0
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = SharedHTTPClient()
	}
	_, traced := hc.Transport.(*http.Transport)
	traced = traced || hc.Transport == nil
	return &Endpoint{base: cfg.BaseURL, url: strings.TrimRight(cfg.BaseURL, "/") + "/", key: cfg.APIKey, retries: retries, timeout: cfg.Timeout, hc: hc, traced: traced}
}

// BaseURL is the endpoint's base URL as configured.
func (e *Endpoint) BaseURL() string { return e.base }

// PostJSON posts body to path (relative to the base URL) and decodes a 2xx answer into dst.
// attempts is how many times the body was sent.
func (e *Endpoint) PostJSON(ctx context.Context, path string, body []byte, dst any) (attempts int, err error) {
	return e.postJSON(ctx, path, body, dst, nil)
}

// postJSON is PostJSON; released, when not nil, is called once the transport let go of body
// (see post).
func (e *Endpoint) postJSON(ctx context.Context, path string, body []byte, dst any, released func()) (attempts int, err error) {
	res, attempts, err := e.post(ctx, path, body, "application/json", released)
	if err != nil {
		return attempts, err
	}
	defer func() { _ = res.Body.Close() }()
	// A page from a proxy or a misconfigured URL is named as such, not as bad JSON. No type at
	// all is read as JSON (some local servers send none).
	if ct := res.Header.Get("Content-Type"); ct != "" {
		if mt, _, _ := mime.ParseMediaType(ct); mt != "application/json" && !strings.HasSuffix(mt, "+json") {
			return attempts, fmt.Errorf("the answer has content-type '%s', not 'application/json'", mt)
		}
	}
	if err := json.NewDecoder(res.Body).Decode(dst); err != nil {
		return attempts, fmt.Errorf("decoding the answer: %w", err)
	}
	// The decoder stops at the value's end; a chunked body's last chunk may still be on its way,
	// and closing the body before it closes the connection (every such call dialled anew).
	drain(res.Body)
	return attempts, nil
}

// post sends body until an answer is final: a 2xx response, whose body carries the attempt's
// timeout and must be closed; an *APIError for any other status; or the transport's error.
//
// released, when not nil, is called once post returned and the transport wrote every copy of
// body it was given: an http.RoundTripper may still read a request body after RoundTrip
// returned, whatever the answer (a server that answers before it read the request). Only then
// may body's bytes be used again. A copy the transport never wrote (a failed connection) keeps
// released from being called, and so does a transport other than net/http's: a RoundTripper
// in front of it may have it write copies of its own (a retrying or a dumping wrapper), each
// a WroteRequest that matches no copy counted here, and body was counted free while a retry
// still read it, and released called twice.
func (e *Endpoint) post(ctx context.Context, path string, body []byte, accept string, released func()) (res *http.Response, attempts int, err error) {
	url := e.url + path
	var refs *bodyRefs
	if released != nil && e.traced {
		refs = &bodyRefs{n: 1, released: released}
		defer refs.drop()
		// The body's reader is a known in-memory one (net/http then writes the request in one
		// piece): its writes, not its Close, say when the transport is done with it.
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { refs.drop() }})
	}
	for attempt := 0; ; attempt++ {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if e.timeout > 0 {
			actx, cancel = context.WithTimeout(ctx, e.timeout)
		}
		req, err := http.NewRequestWithContext(actx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			cancel()
			return nil, attempts, err
		}
		refs.add()
		req.GetBody = func() (io.ReadCloser, error) {
			refs.add()
			return io.NopCloser(bytes.NewReader(body)), nil
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", accept)
		req.Header.Set("User-Agent", "hermes")
		if e.key != "" {
			req.Header.Set("Authorization", "Bearer "+e.key)
		}
		attempts++
		res, err = e.hc.Do(req)
		if cerr := actx.Err(); cerr != nil {
			// Cancelled, or the attempt's time is up: not retried (the call may be running).
			discard(res)
			cancel()
			return nil, attempts, cerr
		}
		delay, retry := time.Duration(0), attempt < e.retries && shouldRetry(res, err)
		if retry {
			delay, retry = retryDelay(res, attempt)
		}
		if !retry {
			switch {
			case err != nil:
				cancel()
				return nil, attempts, err
			case res.StatusCode < 200 || res.StatusCode > 299:
				apiErr := readAPIError(res, e.base)
				cancel()
				return nil, attempts, apiErr
			}
			res.Body = &cancelOnClose{ReadCloser: res.Body, cancel: cancel}
			return res, attempts, nil
		}
		discard(res)
		cancel()
		if !backoff.Sleep(ctx, delay) {
			return nil, attempts, ctx.Err()
		}
	}
}

// shouldRetry reports whether an attempt's outcome is worth another: no answer at all, a status
// the endpoint asks to retry (x-should-retry wins over the status), or 408, 409, 429 or 5xx.
func shouldRetry(res *http.Response, err error) bool {
	if err != nil || res == nil {
		return true
	}
	switch res.Header.Get("x-should-retry") {
	case "true":
		return true
	case "false":
		return false
	}
	s := res.StatusCode
	return s == http.StatusRequestTimeout || s == http.StatusConflict || s == http.StatusTooManyRequests || s >= 500
}

// retryDelay is the pause before retry attempt (0-based): what Retry-After-Ms or Retry-After
// asks for (seconds or an HTTP date), else retryBackoff. It reports false when the endpoint asks
// for longer than maxRetryAfter.
func retryDelay(res *http.Response, attempt int) (time.Duration, bool) {
	if res != nil {
		for _, h := range []struct {
			name string
			unit time.Duration
		}{{"Retry-After-Ms", time.Millisecond}, {"Retry-After", time.Second}} {
			v := strings.TrimSpace(res.Header.Get(h.name))
			if v == "" {
				continue
			}
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				if math.IsNaN(f) || f < 0 {
					continue
				}
				if f > float64(maxRetryAfter)/float64(h.unit) {
					return 0, false
				}
				return time.Duration(f * float64(h.unit)), true
			}
			if t, err := http.ParseTime(v); err == nil {
				d := time.Until(t)
				if d > maxRetryAfter {
					return 0, false
				}
				return max(d, 0), true
			}
		}
	}
	return retryBackoff.Delay(attempt), true
}

// An answer's body is read to its end before it is closed (after a stream's [DONE], the chunked
// encoding's last chunk, which a server sends right after), at most drainLimit bytes and
// drainWait long: net/http closes a connection whose response body is closed before its end,
// and the next call dialled a new one (13 of 200 calls on loopback, when the last chunk arrived
// after [DONE] in its own packet).
const (
	drainLimit = 4 << 10
	drainWait  = 100 * time.Millisecond
)

// drain reads body to its end, within drainLimit and drainWait; a body that goes on or stalls is
// closed (its connection then is too).
func drain(body io.ReadCloser) {
	stop := time.AfterFunc(drainWait, func() { _ = body.Close() })
	_, _ = io.CopyN(io.Discard, body, drainLimit)
	stop.Stop()
}

// discard reads a little of a response that is not used, so its connection can be reused, and
// closes it. The read is bounded in time as well as size (drain): a body that stalls (a proxy's
// 503 that never ends) would otherwise hold the retry until the caller's context ended.
func discard(res *http.Response) {
	if res == nil || res.Body == nil {
		return
	}
	drain(res.Body)
	_ = res.Body.Close()
}

// readAPIError turns an error answer into an *APIError with the provider's message: the
// "message" of its "error" object, else that object (or string) as it came, else the body.
func readAPIError(res *http.Response, base string) *APIError {
	raw, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	_ = res.Body.Close()
	return &APIError{StatusCode: res.StatusCode, Message: errorMessage(raw), BaseURL: base}
}

func errorMessage(body []byte) string {
	var env struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &env) == nil && len(env.Error) > 0 && string(env.Error) != "null" {
		var obj struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(env.Error, &obj) == nil && obj.Message != "" {
			return obj.Message
		}
		return strings.ToValidUTF8(errorText(env.Error), "\uFFFD")
	}
	// The message ends up in proto strings (a turn's TurnFailed), which must be valid UTF-8: the
	// body may not be (a Latin-1 page), and the cut is made on a character boundary.
	const most = 512
	msg := strings.TrimSpace(string(body))
	if len(msg) > most {
		cut := most
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "…"
	}
	return strings.ToValidUTF8(msg, "\uFFFD")
}

// cancelOnClose releases an attempt's timeout when its answer's body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// events reads a server-sent event stream: Next moves to the next event with data, whose data
// lines are joined with (and end in) a newline; an event is complete at its blank line.
type events struct {
	rc   io.ReadCloser
	scn  *bufio.Scanner
	data []byte
	err  error
	bufs *eventBufs
}

// newEvents reads rc's events with the buffers of b (nil: new ones), which belong to the
// events until recycle.
func newEvents(rc io.ReadCloser, b *eventBufs) *events {
	if b == nil {
		b = &eventBufs{line: make([]byte, 0, 4096)}
	}
	scn := bufio.NewScanner(rc)
	scn.Buffer(b.line[:0], maxEventLine)
	return &events{rc: rc, scn: scn, data: b.data[:0], bufs: b}
}

// eventBufs are the buffers of an event stream, recycled between a client's streams: a 4 KiB
// line buffer and the joined data were fresh allocations of every model call.
type eventBufs struct {
	line, data []byte
}

// maxPooledEventData is the largest event data buffer kept for reuse.
const maxPooledEventData = 64 << 10

// recycle returns the stream's buffers for another stream once it is closed and its Data no
// longer used, or nil when the data buffer grew too large to keep.
func (s *events) recycle() *eventBufs {
	if cap(s.data) > maxPooledEventData {
		return nil
	}
	s.bufs.data = s.data[:0]
	return s.bufs
}

// Next reports whether another event was read; Data then holds it.
func (s *events) Next() bool {
	if s.err != nil {
		return false
	}
	s.data = s.data[:0]
	for s.scn.Scan() {
		line := s.scn.Bytes()
		if len(line) == 0 {
			if len(s.data) == 0 {
				continue
			}
			return true
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
		if string(name) == "data" {
			s.data = append(append(s.data, value...), '\n')
		}
	}
	if err := s.scn.Err(); err != nil {
		s.err = err
		if errors.Is(err, bufio.ErrTooLong) {
			s.err = fmt.Errorf("a streamed event line is over %d bytes: %w", maxEventLine, err)
		}
	}
	return false
}

// Data is the current event's data; it is valid until the next call of Next.
func (s *events) Data() []byte { return s.data }

// Err is the error that ended the stream early, if any.
func (s *events) Err() error { return s.err }

// Close closes the stream's body.
func (s *events) Close() error { return s.rc.Close() }

// bodyRefs counts the holders of a request body: the call (post) and each copy of it handed
// to the transport, until the transport wrote it. The last to let go calls released. A nil
// bodyRefs counts nothing.
type bodyRefs struct {
	mu       sync.Mutex
	n        int
	released func()
}

func (r *bodyRefs) add() {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.n++
	r.mu.Unlock()
}

func (r *bodyRefs) drop() {
	r.mu.Lock()
	r.n--
	last := r.n == 0
	r.mu.Unlock()
	if last {
		r.released()
	}
}
