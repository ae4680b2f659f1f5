package browserguard

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func newGuard(t *testing.T, cfg Config) *Guard {
	t.Helper()
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestHostAllowed(t *testing.T) {
	g := newGuard(t, Config{AllowedHosts: []string{"hermes.example.com", "api.example.org:8443", "*.corp.example"}})
	for host, want := range map[string]bool{
		"":                        true, // HTTP/1.0: no browser
		"localhost":               true,
		"localhost:8080":          true,
		"LOCALHOST.:8080":         true,
		"app.localhost:3000":      true,
		"127.0.0.1:8080":          true,
		"[::1]:8080":              true,
		"[::1]":                   true,
		"10.1.2.3:9090":           true, // a pod IP: the kubelet's and Prometheus' Host
		"hermes.example.com":      true,
		"Hermes.Example.com:443":  true,
		"api.example.org:8443":    true,
		"api.example.org":         false, // configured with another port
		"api.example.org:80":      false,
		"x.corp.example:1":        true,
		"corp.example":            false,
		"attacker.example:8080":   false,
		"attacker.example":        false,
		"localhost.attacker.test": false,
		"127.0.0.1.nip.io:8080":   false,
		"evilhermes.example.com":  false,
	} {
		if got := g.HostAllowed(host); got != want {
			t.Errorf("HostAllowed(%q) = %v, want %v", host, got, want)
		}
	}
	if !newGuard(t, Config{AllowedHosts: []string{"*"}}).HostAllowed("attacker.example") {
		t.Error(`"*" does not allow every host`)
	}
}

func TestNewRefusesBadSettings(t *testing.T) {
	for _, cfg := range []Config{
		{AllowedHosts: []string{"http://hermes.example.com"}},
		{AllowedHosts: []string{"hermes.example.com/api"}},
		{AllowedHosts: []string{"hermes.example.com:99999"}},
		{AllowedHosts: []string{"*.*.example"}},
		{AllowedHosts: []string{"user@host"}},
		{AllowedOrigins: []string{"app.example.com"}},
		{AllowedOrigins: []string{"null"}},
		{AllowedOrigins: []string{"https://app.example.com/path"}},
		{AllowedOrigins: []string{"https://user:pw@app.example.com"}},
		{AllowedOrigins: []string{"ftp://app.example.com"}},
		{WriteTypes: []string{"text/plain"}},
		{WriteTypes: []string{"multipart/form-data"}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted a bad setting", cfg)
		}
	}
}

func TestOriginAllowed(t *testing.T) {
	g := newGuard(t, Config{AllowedOrigins: []string{"https://app.example.com", "http://localhost:3000"}})
	mcp := newGuard(t, Config{AllowLoopbackOrigins: true})
	for _, tc := range []struct {
		origin, host       string
		ok, configured     bool
		loopbackOK, mcpCfg bool
	}{
		{"", "127.0.0.1:8080", true, false, true, false},
		{"http://127.0.0.1:8080", "127.0.0.1:8080", true, false, true, false},
		{"http://LOCALHOST:8080", "localhost:8080", true, false, true, false},
		{"https://hermes.example.com", "hermes.example.com", true, false, true, false},
		{"https://hermes.example.com", "hermes.example.com:443", true, false, true, false},
		{"https://hermes.example.com:443", "hermes.example.com", true, false, true, false},
		{"http://hermes.example.com", "hermes.example.com:443", false, false, false, false},
		{"http://127.0.0.1:9999", "127.0.0.1:8080", false, false, true, false}, // another local port
		{"https://app.example.com", "127.0.0.1:8080", true, true, false, false},
		{"https://APP.example.com:443", "127.0.0.1:8080", true, true, false, false},
		{"http://app.example.com", "127.0.0.1:8080", false, false, false, false}, // not the configured scheme
		{"http://localhost:3000", "127.0.0.1:8080", true, true, true, false},
		{"http://attacker.example", "127.0.0.1:8080", false, false, false, false},
		{"http://attacker.example:8080", "attacker.example:8080", true, false, true, false}, // same origin: the Host check refuses rebinding
		{"null", "127.0.0.1:8080", false, false, false, false},
		{"file://", "127.0.0.1:8080", false, false, false, false},
	} {
		ok, configured := g.OriginAllowed(tc.origin, tc.host)
		if ok != tc.ok || configured != tc.configured {
			t.Errorf("OriginAllowed(%q, %q) = %v, %v; want %v, %v", tc.origin, tc.host, ok, configured, tc.ok, tc.configured)
		}
		if ok, _ := mcp.OriginAllowed(tc.origin, tc.host); ok != tc.loopbackOK {
			t.Errorf("with loopback origins: OriginAllowed(%q, %q) = %v, want %v", tc.origin, tc.host, ok, tc.loopbackOK)
		}
	}
}

// TestWrap replays what a page sends: each refusal is a 403 with a JSON body naming the
// setting; clients other than browsers and same-origin pages pass; configured origins get CORS.
func TestWrap(t *testing.T) {
	g := newGuard(t, Config{
		AllowedOrigins: []string{"https://app.example.com"},
		HostsSetting:   "--http-allowed-hosts", OriginsSetting: "--http-allowed-origins",
	})
	reached := 0
	h := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached++ }))
	for _, tc := range []struct {
		name, method, host, origin, ctype, preflight string
		body                                         string
		status                                       int
		mention                                      string
		cors                                         bool
	}{
		{"curl GET", "GET", "127.0.0.1:8080", "", "", "", "", 200, "", false},
		{"JSON POST without Origin", "POST", "127.0.0.1:8080", "", "application/json", "", "{}", 200, "", false},
		{"JSON POST with charset", "POST", "localhost:8080", "", "application/json; charset=utf-8", "", "{}", 200, "", false},
		{"same-origin JSON POST", "POST", "127.0.0.1:8080", "http://127.0.0.1:8080", "application/json", "", "{}", 200, "", false},
		{"DELETE without body or type", "DELETE", "127.0.0.1:8080", "", "", "", "", 200, "", false},
		{"text/plain POST from a foreign page", "POST", "127.0.0.1:8080", "http://attacker.example", "text/plain", "", "{}", 403, "--http-allowed-origins", false},
		{"form POST from a foreign page", "POST", "127.0.0.1:8080", "http://attacker.example", "application/x-www-form-urlencoded", "", "a=b", 403, "--http-allowed-origins", false},
		{"text/plain POST, no Origin", "POST", "127.0.0.1:8080", "", "text/plain", "", "{}", 403, "application/json", false},
		{"POST without type", "POST", "127.0.0.1:8080", "", "", "", "", 403, "application/json", false},
		{"PUT of text", "PUT", "127.0.0.1:8080", "", "text/plain", "", "{}", 403, "application/json", false},
		{"DELETE with a text body", "DELETE", "127.0.0.1:8080", "", "text/plain", "", "x", 403, "application/json", false},
		{"rebinding GET", "GET", "attacker.example:8080", "", "", "", "", 403, "--http-allowed-hosts", false},
		{"rebinding same-origin POST", "POST", "attacker.example:8080", "http://attacker.example:8080", "application/json", "", "{}", 403, "--http-allowed-hosts", false},
		{"null origin", "GET", "127.0.0.1:8080", "null", "", "", "", 403, "--http-allowed-origins", false},
		{"configured origin", "POST", "127.0.0.1:8080", "https://app.example.com", "application/json", "", "{}", 200, "", true},
		{"configured origin's preflight", "OPTIONS", "127.0.0.1:8080", "https://app.example.com", "", "POST", "", 204, "", true},
		{"foreign preflight", "OPTIONS", "127.0.0.1:8080", "http://attacker.example", "", "POST", "", 403, "--http-allowed-origins", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := reached
			req := httptest.NewRequest(tc.method, "http://"+tc.host+"/v1/tools", strings.NewReader(tc.body))
			req.Host = tc.host
			if tc.body == "" {
				req.ContentLength = 0
			}
			for k, v := range map[string]string{"Origin": tc.origin, "Content-Type": tc.ctype, "Access-Control-Request-Method": tc.preflight} {
				if v != "" {
					req.Header.Set(k, v)
				}
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			if passed := reached > before; passed != (tc.status == 200) {
				t.Errorf("handler reached: %v", passed)
			}
			if tc.status == 403 {
				var st struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				}
				if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.Code != 7 || !strings.Contains(st.Message, tc.mention) {
					t.Errorf("refusal body %s (%v): want code 7 and a message naming %s", rec.Body, err, tc.mention)
				}
				if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
					t.Errorf("refusal Content-Type %q", ct)
				}
			}
			if got := rec.Header().Get("Access-Control-Allow-Origin"); (got != "") != tc.cors || (tc.cors && got != tc.origin) {
				t.Errorf("Access-Control-Allow-Origin %q, want CORS %v", got, tc.cors)
			}
		})
	}
}

// TestNoCORSUnlessConfigured: without configured origins no answer carries CORS headers, and a
// preflight is refused.
func TestNoCORSUnlessConfigured(t *testing.T) {
	h := newGuard(t, Config{}).Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, origin := range []string{"http://127.0.0.1:8080", "https://app.example.com"} {
		req := httptest.NewRequest("OPTIONS", "http://127.0.0.1:8080/v1/tools", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		for k := range rec.Header() {
			if strings.HasPrefix(k, "Access-Control-") {
				t.Errorf("origin %s: CORS header %s without configured origins", origin, k)
			}
		}
	}
}

// FuzzCheck: any Host and Origin are judged without a panic, and what passes is safe: the Host
// is a loopback name, an IP address or the configured name; a present Origin is the request's
// own or the configured one.
func FuzzCheck(f *testing.F) {
	for _, s := range [][2]string{
		{"127.0.0.1:8080", ""}, {"attacker.example:8080", "http://attacker.example:8080"}, {"[::1]:80", "http://[::1]"},
		{"localhost", "null"}, {"hermes.example.com", "https://app.example.com"}, {"a.localhost.", "http://a.localhost"},
		{"[fe80::1%25eth0]:1", "http://[fe80::1%25eth0]:1"}, {"", "https://x"}, {"xn--e1a.example:1", "http://XN--E1A.example:1"},
	} {
		f.Add(s[0], s[1])
	}
	g, err := New(Config{AllowedHosts: []string{"hermes.example.com"}, AllowedOrigins: []string{"https://app.example.com"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, host, origin string) {
		req := httptest.NewRequest("GET", "http://127.0.0.1/", nil)
		req.Host = host
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if g.Check(req) != nil {
			return
		}
		if host != "" {
			h, _ := splitHost(host)
			if h != "hermes.example.com" && !isLoopbackName(h) && net.ParseIP(h) == nil {
				t.Fatalf("Host %q passed", host)
			}
		}
		if origin == "" {
			return
		}
		n, ok := normalizeOrigin(origin)
		if !ok {
			t.Fatalf("Origin %q passed but is not an origin", origin)
		}
		if n == "https://app.example.com" {
			return
		}
		u, _ := url.Parse(n)
		h, _ := splitHost(host)
		if !strings.EqualFold(strings.TrimSuffix(u.Hostname(), "."), h) {
			t.Fatalf("Origin %q passed for Host %q: not the same host", origin, host)
		}
	})
}

// TestWriteTypes: a configured type a page cannot send without a preflight passes as a write;
// other types still need JSON.
func TestWriteTypes(t *testing.T) {
	g := newGuard(t, Config{WriteTypes: []string{"application/octet-stream"}})
	for ctype, want := range map[string]bool{
		"application/octet-stream": true,
		"application/json":         true,
		"text/plain":               false,
		"application/xml":          false,
	} {
		req := httptest.NewRequest("POST", "http://127.0.0.1:6060/debug/pprof/symbol", strings.NewReader("0x1"))
		req.Header.Set("Content-Type", ctype)
		if got := g.Check(req) == nil; got != want {
			t.Errorf("POST of %s allowed %v, want %v", ctype, got, want)
		}
	}
}
