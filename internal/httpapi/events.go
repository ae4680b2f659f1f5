package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

// runTurn serves RunTurn as server-sent events: one "data:" line of JSON per TurnEvent, with
// the event's seq as its id, ending after the final event. An error before the first event is
// an ordinary error response (the HTTP status of its gRPC code); one after it is an "error"
// event carrying a google.rpc.Status. A client that goes away cancels the call, and with it
// the turn.
func (s *Server) runTurn(w http.ResponseWriter, r *http.Request) {
	ctx, err := runtime.AnnotateContext(r.Context(), s.gw, r,
		orchestratorv1.OrchestratorService_RunTurn_FullMethodName, runtime.WithHTTPPathPattern(runTurnPattern))
	if err != nil {
		s.httpError(w, r, err)
		return
	}
	req := &orchestratorv1.RunTurnRequest{}
	if err := s.marshaler.NewDecoder(r.Body).Decode(req); err != nil && !errors.Is(err, io.EOF) {
		s.httpError(w, r, status.Errorf(codes.InvalidArgument, "request body: %v", err))
		return
	}
	req.SessionId = r.PathValue("session_id")
	rc := http.NewResponseController(w)
	// The body is read: from here on the client only reads, for as long as the turn runs.
	_ = rc.SetReadDeadline(time.Time{})

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := s.orch.RunTurn(ctx, req)
	if err != nil {
		s.httpError(w, r, err)
		return
	}
	// The first event decides between an error response and a stream: RunTurn's own validation
	// errors arrive on the first receive.
	first, err := stream.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = status.Error(codes.Internal, "the turn's stream ended without an event")
		}
		s.httpError(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	// Proxies such as nginx would otherwise buffer the stream.
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	type received struct {
		msg *orchestratorv1.RunTurnResponse
		err error
	}
	next := make(chan received)
	go func() {
		for {
			msg, err := stream.Recv()
			select {
			case next <- received{msg, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	heartbeat := time.NewTicker(s.opts.Heartbeat)
	defer heartbeat.Stop()
	write := func(frame []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
		if _, err := w.Write(frame); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write(s.eventFrame(first.GetEvent())) {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-heartbeat.C:
			if !write([]byte(": keep-alive\n\n")) {
				return
			}
		case got := <-next:
			switch {
			case errors.Is(got.err, io.EOF):
				return
			case got.err != nil:
				write(s.errorFrame(got.err))
				return
			}
			if !write(s.eventFrame(got.msg.GetEvent())) {
				return
			}
		}
	}
}

// eventFrame is one server-sent event carrying a TurnEvent.
func (s *Server) eventFrame(ev *orchestratorv1.TurnEvent) []byte {
	return s.frame("", strconv.Itoa(int(ev.GetSeq())), ev)
}

// errorFrame is the "error" event that ends a stream cut short by a failed call.
func (s *Server) errorFrame(err error) []byte {
	return s.frame("error", "", status.Convert(err).Proto())
}

// frame renders an event. protojson writes one line, which is what a "data:" field must be.
func (s *Server) frame(event, id string, m proto.Message) []byte {
	data, err := s.marshaler.Marshal(m)
	if err != nil {
		data = fmt.Appendf(nil, `{"code":13,"message":%q}`, "encode the event: "+err.Error())
		event = "error"
	}
	var b []byte
	if event != "" {
		b = append(b, "event: "+event+"\n"...)
	}
	if id != "" {
		b = append(b, "id: "+id+"\n"...)
	}
	b = append(b, "data: "...)
	b = append(b, data...)
	return append(b, "\n\n"...)
}
