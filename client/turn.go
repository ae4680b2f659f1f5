package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

// Turn runs a turn in the session with the user's text and yields its events as they arrive:
// started, the context of each step, recalled memories, text deltas, tool calls and results,
// then completed or failed. See RunTurn.
func (c *Client) Turn(ctx context.Context, sessionID, text string) iter.Seq2[*orchestratorv1.TurnEvent, error] {
	return c.RunTurn(ctx, &orchestratorv1.RunTurnRequest{SessionId: sessionID, Text: text})
}

// RunTurn runs the turn req describes (its user_id defaults to WithUser's) and yields its
// events. An error ends the sequence: a call that failed (with its gRPC code), or a *TurnError
// after the turn's failed event. Breaking out of the loop cancels the call, and with it the
// turn, which the server then records as cancelled.
//
// Each range over the sequence runs a new turn. RunTurn is not retried: the user's message may
// have been stored by a call whose outcome is unknown, and a retry would run the turn twice.
func (c *Client) RunTurn(ctx context.Context, req *orchestratorv1.RunTurnRequest) iter.Seq2[*orchestratorv1.TurnEvent, error] {
	return func(yield func(*orchestratorv1.TurnEvent, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if req.GetUserId() == "" && c.user != "" {
			req = proto.CloneOf(req)
			req.UserId = c.user
		}
		stream, err := c.Orchestrator.RunTurn(ctx, req)
		if err != nil {
			yield(nil, err)
			return
		}
		var failed *orchestratorv1.TurnFailed
		for {
			msg, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				if failed != nil {
					yield(nil, &TurnError{TurnID: failed.GetTurnId(), Code: codeOf(failed.GetCode()), Message: failed.GetMessage()})
				}
				return
			}
			if err != nil {
				yield(nil, err)
				return
			}
			ev := msg.GetEvent()
			if f := ev.GetFailed(); f != nil {
				failed = f
			}
			if !yield(ev, nil) {
				return
			}
		}
	}
}

// TurnError is a turn that ran and failed (its TurnFailed event): the model was unreachable, the
// deadline passed, the turn was cancelled … It carries the gRPC code the server named, so
// Code, status.Code and status.FromError read it as they read call errors.
type TurnError struct {
	TurnID  string
	Code    codes.Code
	Message string
}

func (e *TurnError) Error() string {
	return fmt.Sprintf("turn %s failed: %s: %s", e.TurnID, e.Code, e.Message)
}

// GRPCStatus makes the error's code visible to status.FromError and status.Code.
func (e *TurnError) GRPCStatus() *status.Status { return status.New(e.Code, e.Message) }

// codeOf parses a gRPC code name such as "UNAVAILABLE"; an unknown name is codes.Unknown.
func codeOf(name string) codes.Code {
	var c codes.Code
	if err := c.UnmarshalJSON([]byte(`"` + name + `"`)); err != nil {
		return codes.Unknown
	}
	return c
}
