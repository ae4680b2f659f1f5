package console

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func TestHandler(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(Prefix, Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	tests := []struct {
		method, path string
		status       int
		ctype        string
	}{
		{"GET", "/ui/", http.StatusOK, "text/html; charset=utf-8"},
		{"GET", "/ui/index.html", http.StatusOK, "text/html; charset=utf-8"},
		{"GET", "/ui/app.js", http.StatusOK, "text/javascript; charset=utf-8"},
		{"GET", "/ui/app.css", http.StatusOK, "text/css; charset=utf-8"},
		{"HEAD", "/ui/app.js", http.StatusOK, "text/javascript; charset=utf-8"},
		{"GET", "/ui", http.StatusOK, "text/html; charset=utf-8"}, // redirected to /ui/
		{"GET", "/ui/console.go", http.StatusNotFound, ""},
		{"GET", "/ui/assets/app.js", http.StatusNotFound, ""},
		{"GET", "/ui/%2e%2e/console.go", http.StatusNotFound, ""},
		{"POST", "/ui/", http.StatusMethodNotAllowed, ""},
		{"DELETE", "/ui/app.js", http.StatusMethodNotAllowed, ""},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if tc.ctype != "" && resp.Header.Get("Content-Type") != tc.ctype {
				t.Errorf("Content-Type %q, want %q", resp.Header.Get("Content-Type"), tc.ctype)
			}
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
				for h, want := range map[string]string{
					"Content-Security-Policy": contentSecurityPolicy,
					"X-Content-Type-Options":  "nosniff",
					"X-Frame-Options":         "DENY",
					"Referrer-Policy":         "no-referrer",
				} {
					if got := resp.Header.Get(h); got != want {
						t.Errorf("%s: %q, want %q", h, got, want)
					}
				}
			}
		})
	}
}

// TestPolicy: the policy allows nothing inline and nothing from another origin, and no framing.
func TestPolicy(t *testing.T) {
	for _, want := range []string{"default-src 'self'", "script-src 'self'", "style-src 'self'", "object-src 'none'", "base-uri 'none'", "form-action 'none'", "frame-ancestors 'none'"} {
		if !strings.Contains(contentSecurityPolicy, want) {
			t.Errorf("policy %q lacks %q", contentSecurityPolicy, want)
		}
	}
	for _, bad := range []string{"unsafe-inline", "unsafe-eval", "data:", "*", "http:", "https:"} {
		if strings.Contains(contentSecurityPolicy, bad) {
			t.Errorf("policy %q allows %q", contentSecurityPolicy, bad)
		}
	}
}

// TestAssets: the page has no inline script, style or event handler (the policy would block
// them anyway), and the script never writes HTML: no innerHTML, outerHTML, insertAdjacentHTML,
// document.write or eval, and no links or sources set from data.
func TestAssets(t *testing.T) {
	read := func(name string) string {
		b, err := assets.ReadFile("assets/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	html := read("index.html")
	for _, re := range []string{`<script>`, `<script(?:\s+[^>]*)?>[^<]+</script>`, `<style`, `\sstyle=`, `\son[a-z]+=`, `javascript:`, `href="http`, `src="http`} {
		if regexp.MustCompile(`(?i)` + re).MatchString(html) {
			t.Errorf("index.html matches %s", re)
		}
	}
	js := read("app.js")
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", ".href =", ".src =", "setAttribute(", "localStorage"} {
		if strings.Contains(js, bad) {
			t.Errorf("app.js uses %s", bad)
		}
	}
}
