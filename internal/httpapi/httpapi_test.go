package httpapi

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/testenv"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

// orchestrator is a test double of the orchestrator: its RunTurn sends a started event and a
// text with a line break in it, waits until the test releases it, then fails the stream.
type orchestrator struct {
	orchestratorv1.UnimplementedOrchestratorServiceServer
	release chan struct{}
	auth    chan []string
}

func (o *orchestrator) RunTurn(req *orchestratorv1.RunTurnRequest, stream grpc.ServerStreamingServer[orchestratorv1.RunTurnResponse]) error {
	md, _ := metadata.FromIncomingContext(stream.Context())
	o.auth <- md.Get("authorization")
	if req.GetText() == "" {
		return status.Error(codes.InvalidArgument, "text is required")
	}
	for i, ev := range []*orchestratorv1.TurnEvent{
		{Event: &orchestratorv1.TurnEvent_Started{Started: &orchestratorv1.TurnStarted{TurnId: "t1", SessionId: req.GetSessionId()}}},
		{Event: &orchestratorv1.TurnEvent_Delta{Delta: &orchestratorv1.TextDelta{Text: "two\nlines"}}},
	} {
		ev.Seq = int32(i + 1)
		if err := stream.Send(&orchestratorv1.RunTurnResponse{Event: ev}); err != nil {
			return err
		}
	}
	select {
	case <-o.release:
	case <-stream.Context().Done():
		return stream.Context().Err()
	}
	return status.Error(codes.Unavailable, "the model went away")
}

// TestEventStream checks RunTurn's event stream through a real gRPC connection: the path's
// session, the Authorization header as metadata, one data line per event (a line break in the
// text stays escaped), heartbeat comments while the turn is quiet, an error after the stream
// started as an "error" event, and an error before it as a JSON error response.
func TestEventStream(t *testing.T) {
	srv := rpc.NewServer(rpc.ServerOptions{Logger: slog.New(slog.DiscardHandler)})
	o := &orchestrator{release: make(chan struct{}), auth: make(chan []string, 2)}
	srv.Register(&orchestratorv1.OrchestratorService_ServiceDesc, o)
	conn := testenv.Serve(t, srv)
	api, err := New(conn, Options{Services: []string{orchestratorv1.OrchestratorService_ServiceDesc.ServiceName}, Heartbeat: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(api.Handler())
	defer hs.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", hs.URL+"/v1/sessions/s1/turns", strings.NewReader(`{"text":"hi","session_id":"ignored"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer k-0123456789abcdef")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if got := <-o.auth; !cmp.Equal(got, []string{"Bearer k-0123456789abcdef"}) {
		t.Errorf("authorization metadata %q", got)
	}
	var lines []string
	released := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if sc.Text() == ": keep-alive" && !released {
			// The turn is quiet: let it fail now.
			close(o.release)
			released = true
		}
	}
	// Heartbeats may come more than once before the failure arrives: keep one.
	joined := strings.Join(lines, "\n")
	for strings.Contains(joined, ": keep-alive\n\n: keep-alive\n") {
		joined = strings.ReplaceAll(joined, ": keep-alive\n\n: keep-alive\n", ": keep-alive\n")
	}
	lines = strings.Split(joined, "\n")
	want := []string{
		"id: 1",
		`data: {"seq":1,"time":null,"started":{"turn_id":"t1","session_id":"s1","user_message_seq":"0","model":"","user_id":""}}`,
		"",
		"id: 2",
		`data: {"seq":2,"time":null,"delta":{"text":"two\nlines","step":0}}`,
		"",
		": keep-alive",
		"",
		"event: error",
		`data: {"code":14,"message":"the model went away","details":[]}`,
		"",
	}
	// protojson may put a space after ':' and ','; compare without.
	norm := func(ls []string) []string {
		out := make([]string, len(ls))
		for i, l := range ls {
			out[i] = strings.NewReplacer(`": `, `":`, `, "`, `,"`).Replace(l)
		}
		return out
	}
	if diff := cmp.Diff(want, norm(lines)); diff != "" {
		t.Errorf("event stream (-want +got):\n%s", diff)
	}

	// An error before the first event is a plain JSON error with the code's HTTP status.
	req, _ = http.NewRequestWithContext(ctx, "POST", hs.URL+"/v1/sessions/s1/turns", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	<-o.auth
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "text is required") {
		t.Errorf("no text: %d %s", resp.StatusCode, body)
	}
}

// TestBodyLimit: a body over the limit is refused, declared (413) or not (an error while
// reading).
func TestBodyLimit(t *testing.T) {
	srv := rpc.NewServer(rpc.ServerOptions{Logger: slog.New(slog.DiscardHandler)})
	o := &orchestrator{release: make(chan struct{}), auth: make(chan []string, 2)}
	srv.Register(&orchestratorv1.OrchestratorService_ServiceDesc, o)
	api, err := New(testenv.Serve(t, srv), Options{MaxBodyBytes: 64})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(api.Handler())
	defer hs.Close()
	big := `{"text":"` + strings.Repeat("x", 100) + `"}`
	for _, tc := range []struct {
		name   string
		body   io.Reader
		status int
	}{
		{"declared", strings.NewReader(big), http.StatusRequestEntityTooLarge},
		// No Content-Length: the limit is found while reading.
		{"chunked", io.MultiReader(strings.NewReader(big)), http.StatusBadRequest},
	} {
		resp, err := http.Post(hs.URL+"/v1/sessions/s1/turns", "application/json", tc.body)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.Contains(string(body), `"message"`) {
			t.Errorf("%s: %d %s, want %d", tc.name, resp.StatusCode, body, tc.status)
		}
	}
}
