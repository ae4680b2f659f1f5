package telemetry

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"testing"
)

func TestBuildInfoMetric(t *testing.T) {
	ctx := context.Background()
	tel, err := Setup(ctx, Options{ServiceName: "hermes-test", Version: "v1.2.3", Revision: "c326128", MetricsListen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tel.Shutdown(ctx) }()
	resp, err := http.Get("http://" + tel.MetricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	want := `hermes_build_info{go_version="` + runtime.Version() + `",revision="c326128",version="v1.2.3"} 1`
	if !strings.Contains(string(body), want) {
		t.Errorf("/metrics lacks %s:\n%s", want, body)
	}
}
