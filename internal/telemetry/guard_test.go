package telemetry

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/hermes-agent/hermes/internal/browserguard"
)

// TestMetricsListenerGuarded: with the browser guard as Middleware, every handler of the
// metrics listener (those added later with Handle too) refuses a rebound Host and a foreign
// page, and answers a scraper that uses the address.
func TestMetricsListenerGuarded(t *testing.T) {
	ctx := context.Background()
	g, err := browserguard.New(browserguard.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tel, err := Setup(ctx, Options{ServiceName: "hermes-test", MetricsListen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler), Middleware: g.Wrap})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tel.Shutdown(ctx) }()
	tel.Handle("/readyz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ready\n")) }))
	port := tel.MetricsAddr[strings.LastIndex(tel.MetricsAddr, ":")+1:]
	for _, tc := range []struct {
		path, host, origin string
		want               int
	}{
		{"/metrics", "", "", http.StatusOK},
		{"/readyz", "localhost:" + port, "", http.StatusOK},
		{"/metrics", "attacker.example:" + port, "", http.StatusForbidden},
		{"/readyz", "attacker.example:" + port, "", http.StatusForbidden},
		{"/metrics", "", "http://attacker.example", http.StatusForbidden},
	} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+tel.MetricsAddr+tc.path, nil)
		if tc.host != "" {
			req.Host = tc.host
		}
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s Host %q Origin %q: HTTP %d %.200s, want %d", tc.path, tc.host, tc.origin, resp.StatusCode, body, tc.want)
		}
	}
}
