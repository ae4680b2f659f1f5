package app

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// The health listener answers the kubelet's plaintext probes with each service's state and
// serves nothing else.
func TestHealthListener(t *testing.T) {
	a, err := newMemoryApp(t, "--health-listen=127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a.Start()
	get := func(path string) (int, string) {
		t.Helper()
		res, err := http.Get("http://" + a.HealthAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}
	for _, tc := range []struct {
		path     string
		wantCode int
		wantBody string
	}{
		{"/readyz", http.StatusOK, "ok"},
		{"/livez", http.StatusOK, "hermes.memory.v1.MemoryService SERVING"},
		{"/metrics", http.StatusNotFound, ""},
		{"/debug/pprof/", http.StatusNotFound, ""},
		{"/v1/memories", http.StatusNotFound, ""},
	} {
		code, body := get(tc.path)
		if code != tc.wantCode || !strings.Contains(body, tc.wantBody) {
			t.Errorf("GET %s = %d %q, want %d with %q", tc.path, code, body, tc.wantCode, tc.wantBody)
		}
	}
}
