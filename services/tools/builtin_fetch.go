package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"
)

// httpFetchArgs are http_fetch's arguments; its input schema is derived from them.
type httpFetchArgs struct {
	URL string `json:"url" jsonschema:"The http or https URL to GET. Only hosts on the operator's allow-list can be fetched."`
}

// fetcher GETs URLs whose host is on an allow-list, following redirects only to allowed hosts
// and returning at most maxBytes of text.
type fetcher struct {
	allow    []string
	maxBytes int
	client   *http.Client
}

func newFetcher(allow []string, maxBytes int, transport http.RoundTripper) *fetcher {
	f := &fetcher{allow: allow, maxBytes: maxBytes}
	if transport == nil {
		transport = http.DefaultTransport
	}
	f.client = &http.Client{
		Transport: transport,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errors.New("more than 5 redirects")
			}
			if !f.allowed(req.URL) {
				return fmt.Errorf("redirected to %s, whose host is not on the allow-list", req.URL.Redacted())
			}
			return nil
		},
	}
	return f
}

// allowed matches the URL's host (case-insensitive) and port against the allow-list. An entry
// "example.com" allows the scheme's default port (80 or 443) only, "example.com:8443" that
// port, "example.com:*" any; "*.example.com" matches subdomains of example.com but not
// example.com itself. Where the connection actually goes is checked again by the egress policy.
func (f *fetcher) allowed(u *url.URL) bool {
	host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	if host == "" {
		return false
	}
	port := u.Port()
	defaultPort := map[string]string{"http": "80", "https": "443"}[u.Scheme]
	if port == "" {
		port = defaultPort
	}
	for _, a := range f.allow {
		a = strings.ToLower(strings.TrimSpace(a))
		ah, ap := a, ""
		if h, p, err := net.SplitHostPort(a); err == nil {
			ah, ap = h, p
		}
		switch {
		case ap == "" && port != defaultPort, ap != "" && ap != "*" && ap != port:
			continue
		}
		if sfx, ok := strings.CutPrefix(ah, "*."); ok {
			if strings.HasSuffix(host, "."+sfx) {
				return true
			}
		} else if host == ah {
			return true
		}
	}
	return false
}

// fetchOutput is what http_fetch returns.
type fetchOutput struct {
	URL         string `json:"url"`
	Status      int    `json:"status"`
	ContentType string `json:"content_type,omitempty"`
	Body        string `json:"body,omitempty"`
	Bytes       int    `json:"bytes"`
	Truncated   bool   `json:"truncated,omitempty"`
	Note        string `json:"note,omitempty"`
}

func httpFetchBuiltin(f *fetcher) *Builtin {
	return newBuiltin(spec("http_fetch",
		"Fetch a web page or API response with an HTTP GET and return its text. Only hosts the operator allowed can be fetched.",
		derivedSchema, 15*time.Second, true, "web"),
		map[string]lengths{"url": {min: 1, max: 2048}},
		func(ctx context.Context, in httpFetchArgs) (any, error) {
			return f.fetch(ctx, in.URL)
		})
}

func (f *fetcher) fetch(ctx context.Context, raw string) (*fetchOutput, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, failf("%q is not an absolute http or https URL", truncateRunes(raw, 200))
	}
	if len(f.allow) == 0 {
		return nil, failf("fetching is disabled: no host is allowed (the operator sets --tools.fetch-allow)")
	}
	if !f.allowed(u) {
		return nil, failf("the host %q is not on the allow-list (%s); fetch only from those hosts", u.Hostname(), strings.Join(f.allow, ", "))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, failf("cannot build the request: %v", err)
	}
	req.Header.Set("User-Agent", "hermes-http-fetch/1")
	req.Header.Set("Accept", "text/html, text/plain, application/json, */*;q=0.5")
	resp, err := f.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var ue *url.Error
		if errors.As(err, &ue) && strings.Contains(ue.Err.Error(), "allow-list") {
			return nil, failf("%v", ue.Err)
		}
		return nil, &transientError{fmt.Errorf("fetch %s: %w", u.Redacted(), err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil, &transientError{fmt.Errorf("fetch %s: HTTP %d", u.Redacted(), resp.StatusCode)}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(f.maxBytes)+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &transientError{fmt.Errorf("read %s: %w", u.Redacted(), err)}
	}
	out := &fetchOutput{URL: resp.Request.URL.String(), Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Bytes: len(body)}
	if len(body) > f.maxBytes {
		body = body[:f.maxBytes]
		// Drop a rune cut in half at the end.
		for i := 0; i < 3 && len(body) > 0 && !utf8.FullRune(body[lastRuneStart(body):]); i++ {
			body = body[:lastRuneStart(body)]
		}
		out.Truncated = true
		out.Note = fmt.Sprintf("the body was cut to its first %d bytes", f.maxBytes)
	}
	mt, _, _ := mime.ParseMediaType(out.ContentType)
	if isTextual(mt) || (mt == "" && utf8.Valid(body)) {
		out.Body = strings.ToValidUTF8(string(body), "\uFFFD")
	} else {
		out.Note = fmt.Sprintf("binary content (%s) is not returned", mt)
	}
	return out, nil
}

func isTextual(mt string) bool {
	return strings.HasPrefix(mt, "text/") || mt == "application/json" || strings.HasSuffix(mt, "+json") ||
		mt == "application/xml" || strings.HasSuffix(mt, "+xml") || mt == "application/javascript"
}

func lastRuneStart(b []byte) int {
	i := len(b) - 1
	for i > 0 && !utf8.RuneStart(b[i]) {
		i--
	}
	return max(i, 0)
}
