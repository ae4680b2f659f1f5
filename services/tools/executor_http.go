package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/hermes-agent/hermes/internal/egress"
	"github.com/hermes-agent/hermes/internal/secretenv"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// httpExecutor POSTs the arguments to the tool's URL. A 2xx body is the output; 429 and 5xx and
// connection failures are transient; other statuses are the tool's failure.
type httpExecutor struct {
	client   *http.Client
	secrets  *secretenv.Reader
	maxBytes int
}

func newHTTPExecutor(client *http.Client, eg *egress.Policy, secrets *secretenv.Reader, maxBytes int) *httpExecutor {
	if client == nil {
		// The trace context travels to the webhook, so its spans join the turn's trace.
		client = &http.Client{Transport: otelhttp.NewTransport(eg.Transport()), CheckRedirect: httpNoRedirect}
	}
	return &httpExecutor{client: client, secrets: secrets, maxBytes: maxBytes}
}

func (x *httpExecutor) attempt(ctx context.Context, c *call) ([]byte, error) {
	h := c.tool.GetSpec().GetHttp()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.GetUrl(), bytes.NewReader(c.args))
	if err != nil {
		return nil, &execError{code: toolsv1.ErrorCode_ERROR_CODE_EXECUTION, msg: "cannot build the request: " + err.Error()}
	}
	for k, v := range h.GetHeaders() {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/plain;q=0.9, */*;q=0.5")
	req.Header.Set("User-Agent", "hermes-tools/1")
	req.Header.Set("X-Hermes-Tool", c.tool.GetSpec().GetName())
	setIf(req.Header, "X-Hermes-Call-Id", c.req.GetCallId())
	setIf(req.Header, "X-Hermes-Session-Id", c.req.GetSessionId())
	setIf(req.Header, "X-Hermes-User-Id", c.req.GetUserId())
	req.Header.Set("X-Hermes-Attempt", strconv.Itoa(c.attempt))
	if c.idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", c.idempotencyKey)
	}
	if env := h.GetSecretEnv(); env != "" {
		// Checked again here: the spec may come from a store written by an older version or
		// another writer.
		secret, err := x.secrets.Lookup(env)
		if err != nil {
			return nil, &execError{code: toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE, msg: "the tool is not configured: " + err.Error()}
		}
		if hdr := h.GetSecretHeader(); hdr != "" && !strings.EqualFold(hdr, "Authorization") {
			req.Header.Set(hdr, secret)
		} else {
			req.Header.Set("Authorization", "Bearer "+secret)
		}
	}
	// Whether the request was written decides if a failed attempt may have reached the tool.
	var wrote atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Store(true) },
	}))
	resp, err := x.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &execError{
			code:       toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE,
			transient:  true,
			mayHaveRun: wrote.Load(),
			msg:        "the tool's endpoint could not be reached: " + connError(err),
		}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(x.maxBytes)+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &execError{code: toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE, transient: true, mayHaveRun: true, msg: "the response was cut off: " + connError(err)}
	}
	if len(body) > x.maxBytes {
		return nil, &execError{code: toolsv1.ErrorCode_ERROR_CODE_EXECUTION, msg: fmt.Sprintf("the response is larger than %d bytes", x.maxBytes)}
	}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return bodyOutput(body), nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		code := toolsv1.ErrorCode_ERROR_CODE_EXECUTION
		switch resp.StatusCode {
		case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			code = toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE
		}
		return nil, &execError{
			code:       code,
			transient:  true,
			retryAfter: retryAfter(resp.Header.Get("Retry-After")),
			msg:        fmt.Sprintf("the tool's endpoint answered HTTP %d%s", resp.StatusCode, bodyPreview(body)),
		}
	default:
		return nil, &execError{code: toolsv1.ErrorCode_ERROR_CODE_EXECUTION, msg: fmt.Sprintf("the tool failed with HTTP %d%s", resp.StatusCode, bodyPreview(body))}
	}
}

func setIf(h http.Header, k, v string) {
	if v != "" {
		h.Set(k, v)
	}
}

// bodyOutput is the output JSON of a 2xx body: the body itself when it is JSON, else a JSON
// string of its text.
func bodyOutput(body []byte) []byte {
	t := bytes.TrimSpace(body)
	if len(t) > 0 && json.Valid(t) {
		var buf bytes.Buffer
		if json.Compact(&buf, t) == nil {
			return buf.Bytes()
		}
	}
	s, _ := json.Marshal(strings.ToValidUTF8(string(body), "\uFFFD"))
	return s
}

// bodyPreview quotes the start of an error body, which often says what went wrong.
func bodyPreview(body []byte) string {
	t := strings.TrimSpace(strings.ToValidUTF8(string(body), "\uFFFD"))
	if t == "" {
		return ""
	}
	if len(t) > 500 {
		cut := 500
		for cut > 0 && !utf8.RuneStart(t[cut]) {
			cut--
		}
		t = t[:cut] + "…"
	}
	return ": " + t
}

// retryAfter reads a Retry-After header given in seconds or as an HTTP date.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// connError describes a connection failure without Go's request dump.
func connError(err error) string {
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Error()
	}
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) && ue.Unwrap() != nil {
		return ue.Unwrap().Error()
	}
	return err.Error()
}
