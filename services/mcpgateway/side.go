package mcpgateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The SDK (v1.8.0, the newest the module proxy serves) has no client methods for MCP tasks
// (2025-11-25: a task-augmented tools/call, tasks/get, tasks/result, tasks/cancel) and drops a
// tool's execution.taskSupport from tools/list. The side channel sends those requests on the
// session's own connection — the stdio pipe, or a POST to the Streamable HTTP endpoint with the
// session's id — with request ids the SDK never uses.

// sideIDPrefix starts the id of every side-channel request.
const sideIDPrefix = "hermes-side-"

// maxSideResponse bounds one side-channel response.
const maxSideResponse = 32 << 20

// sideChannel sends a JSON-RPC request outside the SDK and returns its result.
type sideChannel interface {
	call(ctx context.Context, sess *mcp.ClientSession, method string, params any) (json.RawMessage, error)
}

// sideRequest is the wire form of a side-channel request.
type sideRequest struct {
	JSONRPC string `json:"jsonrpc"`
	ID      string `json:"id"`
	Method  string `json:"method"`
	Params  any    `json:"params,omitempty"`
}

// wireMessage is any JSON-RPC message, as far as the side channel needs to read it.
type wireMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *jsonrpc.Error  `json:"error"`
}

// statelessProtocol reports whether the session negotiated protocol 2026-07-28 or later
// (SEP-2575: per-request _meta, subscriptions/listen).
func statelessProtocol(sess *mcp.ClientSession) bool {
	init := sess.InitializeResult()
	return init != nil && init.ProtocolVersion >= "2026-07-28"
}

// sideParams adds the per-request _meta that protocol 2026-07-28 requires (SEP-2575) when the
// session negotiated it; params must marshal to a JSON object.
func sideParams(sess *mcp.ClientSession, params any) (any, error) {
	if !statelessProtocol(sess) {
		return params, nil
	}
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	meta, _ := m["_meta"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	meta[mcp.MetaKeyProtocolVersion] = sess.InitializeResult().ProtocolVersion
	if _, ok := meta[mcp.MetaKeyClientCapabilities]; !ok {
		meta[mcp.MetaKeyClientCapabilities] = map[string]any{}
	}
	m["_meta"] = meta
	return m, nil
}

// encodeSide is a side-channel request with the next id of next.
func encodeSide(sess *mcp.ClientSession, next *atomic.Int64, method string, params any) (string, []byte, error) {
	params, err := sideParams(sess, params)
	if err != nil {
		return "", nil, err
	}
	id := sideIDPrefix + strconv.FormatInt(next.Add(1), 10)
	data, err := json.Marshal(sideRequest{JSONRPC: "2.0", ID: id, Method: method, Params: params})
	return id, data, err
}

type sideResult struct {
	result json.RawMessage
	err    error
}

// stdioSide is the side channel of a stdio session: requests are written to stdin, and the line
// filter hands their responses over (take) before the SDK reads stdout.
type stdioSide struct {
	w    *procStdin // set when the process starts
	next atomic.Int64

	mu      sync.Mutex // guards waiting and done
	waiting map[string]chan sideResult
	done    error // the connection ended
}

func newStdioSide() *stdioSide { return &stdioSide{waiting: map[string]chan sideResult{}} }

func (s *stdioSide) call(ctx context.Context, sess *mcp.ClientSession, method string, params any) (json.RawMessage, error) {
	return s.request(ctx, sess, method, params, false)
}

// request sends a request and waits for its response. With cancelOnEnd, a request the caller
// gives up on (ctx ends) is cancelled on the server with notifications/cancelled, as the SDK
// does for its own requests (not for task-augmented ones, which tasks/cancel ends).
func (s *stdioSide) request(ctx context.Context, sess *mcp.ClientSession, method string, params any, cancelOnEnd bool) (json.RawMessage, error) {
	id, data, err := encodeSide(sess, &s.next, method, params)
	if err != nil {
		return nil, err
	}
	ch := make(chan sideResult, 1)
	s.mu.Lock()
	if s.done != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: %v", mcp.ErrConnectionClosed, s.done)
	}
	s.waiting[id] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.waiting, id)
		s.mu.Unlock()
	}()
	if s.w == nil {
		return nil, mcp.ErrConnectionClosed
	}
	if _, err := s.w.Write(append(data, '\n')); err != nil {
		return nil, fmt.Errorf("%w: %v", mcp.ErrConnectionClosed, err)
	}
	select {
	case r := <-ch:
		return r.result, r.err
	case <-ctx.Done():
		if cancelOnEnd {
			s.cancel(id, ctx.Err())
		}
		return nil, ctx.Err()
	}
}

// cancel tells the server that the caller gave up on request id. It is sent off the caller's
// path (a full pipe must not hold the caller past its deadline) and is best-effort.
func (s *stdioSide) cancel(id string, why error) {
	data, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/cancelled",
		"params": mcp.CancelledParams{RequestID: id, Reason: why.Error()}})
	if err != nil || s.w == nil {
		return
	}
	go func() { _, _ = s.w.Write(append(data, '\n')) }()
}

// take consumes a line that answers a side-channel request (even one nobody waits for any
// more); it reports false for every other line, which goes on to the SDK.
func (s *stdioSide) take(line []byte) bool {
	if !bytes.Contains(line, []byte(sideIDPrefix)) {
		return false
	}
	var m wireMessage
	if json.Unmarshal(line, &m) != nil || m.Method != "" {
		return false
	}
	var id string
	if json.Unmarshal(m.ID, &id) != nil || !strings.HasPrefix(id, sideIDPrefix) {
		return false
	}
	s.mu.Lock()
	ch := s.waiting[id]
	s.mu.Unlock()
	if ch != nil {
		ch <- resultOf(&m)
	}
	return true
}

// fail ends every pending request: the connection is gone.
func (s *stdioSide) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		s.done = err
	}
	for id, ch := range s.waiting {
		select {
		case ch <- sideResult{err: fmt.Errorf("%w: %v", mcp.ErrConnectionClosed, err)}:
		default:
		}
		delete(s.waiting, id)
	}
}

func resultOf(m *wireMessage) sideResult {
	if m.Error != nil {
		return sideResult{err: m.Error}
	}
	return sideResult{result: m.Result}
}

// httpSide is the side channel of a Streamable HTTP session: each request is a POST with the
// session's id and protocol version, answered with JSON or an SSE stream. Notifications on that
// stream (progress of the request) go to notify.
type httpSide struct {
	client *http.Client
	url    string
	next   atomic.Int64
	notify func(method string, params json.RawMessage)
}

func (h *httpSide) call(ctx context.Context, sess *mcp.ClientSession, method string, params any) (json.RawMessage, error) {
	id, body, err := encodeSide(sess, &h.next, method, params)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if sid := sess.ID(); sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	if init := sess.InitializeResult(); init != nil {
		req.Header.Set("Mcp-Protocol-Version", init.ProtocolVersion)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", mcp.ErrConnectionClosed, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("%s: HTTP %d %s", method, resp.StatusCode, abbreviate(strings.TrimSpace(string(msg)), 200))
	}
	r := io.LimitReader(resp.Body, maxSideResponse)
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if ct == "text/event-stream" {
		return h.readStream(r, id)
	}
	var msgs []wireMessage
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(data)) > 0 && bytes.TrimSpace(data)[0] == '[' {
		err = json.Unmarshal(data, &msgs)
	} else {
		var m wireMessage
		err = json.Unmarshal(data, &m)
		msgs = []wireMessage{m}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: the response is not JSON-RPC: %w", method, err)
	}
	for i := range msgs {
		if r, ok := h.answers(&msgs[i], id); ok {
			return r.result, r.err
		}
	}
	return nil, fmt.Errorf("%s: the response has no result for the request", method)
}

// readStream reads an SSE response until the event that answers id.
func (h *httpSide) readStream(r io.Reader, id string) (json.RawMessage, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxSideResponse)
	var data []byte
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) == 0:
			if len(data) > 0 {
				var m wireMessage
				if json.Unmarshal(data, &m) == nil {
					if res, ok := h.answers(&m, id); ok {
						return res.result, res.err
					}
				}
			}
			data = data[:0]
		case bytes.HasPrefix(line, []byte("data:")):
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))...)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", mcp.ErrConnectionClosed, err)
	}
	return nil, fmt.Errorf("%w: the stream ended before the response", mcp.ErrConnectionClosed)
}

// answers reports whether m is the response to id, passing notifications on.
func (h *httpSide) answers(m *wireMessage, id string) (sideResult, bool) {
	if m.Method != "" {
		if len(m.ID) == 0 && h.notify != nil {
			h.notify(m.Method, m.Params)
		}
		return sideResult{}, false
	}
	var got string
	if json.Unmarshal(m.ID, &got) != nil || got != id {
		return sideResult{}, false
	}
	return resultOf(m), true
}
