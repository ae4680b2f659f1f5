package main

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hermes-agent/hermes/app/demo"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

// cancelGrace is how long the chat waits, after asking the server to cancel a turn, for the
// turn's stream to end before it stops reading (which cancels the turn too).
const cancelGrace = 5 * time.Second

// chatTurn is a turn as the chat saw it, for /context.
type chatTurn struct {
	session string
	events  []*orchestratorv1.TurnEvent
}

// started is the turn's TurnStarted event, nil before it arrived.
func (t *chatTurn) started() *orchestratorv1.TurnStarted {
	for _, ev := range t.events {
		if s := ev.GetStarted(); s != nil {
			return s
		}
	}
	return nil
}

// turn runs a message and prints its events. Ctrl-C asks the server to cancel the turn
// (CancelTurn) and waits a little for the stream to end with the cancellation; when the server
// cannot (CancelTurn unimplemented, or no answer), or on a second Ctrl-C, the chat stops reading
// the stream, which cancels the turn as well.
func (c *chatClient) turn(ctx context.Context, text string, sticky bool) error {
	opts := &orchestratorv1.TurnOptions{Sticky: sticky}
	if c.timeout > 0 {
		opts.Timeout = durationpb.New(c.timeout)
	}
	// A Ctrl-C pressed before this turn is not for it.
	for len(c.env.interrupts) > 0 {
		<-c.env.interrupts
	}
	tctx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	stream, err := c.orch.RunTurn(c.auth(tctx), &orchestratorv1.RunTurnRequest{SessionId: c.session, UserId: c.user, Text: text, Options: opts})
	if err != nil {
		return err
	}
	type received struct {
		ev  *orchestratorv1.TurnEvent
		err error
	}
	events := make(chan received)
	go func() {
		for {
			msg, err := stream.Recv()
			select {
			case events <- received{msg.GetEvent(), err}:
			case <-tctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	p := &demo.Printer{W: c.env.stdout, Verbose: c.verbose, Live: c.live}
	defer p.Flush()
	t := &chatTurn{session: c.session}
	c.last = t
	var grace <-chan time.Time
	cancelling := false
	for {
		select {
		case r := <-events:
			switch {
			case errors.Is(r.err, io.EOF):
				return nil
			case r.err != nil && cancelling && status.Code(r.err) == codes.Canceled:
				p.Flush()
				c.out("  ⏹ turn cancelled (the chat stopped reading it)\n")
				return nil
			case r.err != nil:
				return r.err
			}
			t.events = append(t.events, r.ev)
			p.Event(r.ev)
			if e := r.ev.GetToolProgress().GetElicitation(); e != nil {
				// The tool waits for the user: ask now (the stream waits meanwhile).
				p.Flush()
				c.elicit(ctx, t.started().GetTurnId(), e)
			}
		case <-c.env.interrupts:
			p.Flush()
			if cancelling {
				stopReading()
				continue
			}
			cancelling = true
			grace = time.After(cancelGrace)
			s := t.started()
			if s == nil {
				stopReading()
				continue
			}
			c.out("  … cancelling the turn (Ctrl-C again to stop waiting)\n")
			go c.cancelTurn(ctx, s.GetTurnId(), stopReading)
		case <-grace:
			stopReading()
		case <-tctx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			p.Flush()
			c.out("  ⏹ turn cancelled (the chat stopped reading it)\n")
			return nil
		}
	}
}

// cancelTurn asks the server to cancel a running turn; when it cannot, the chat stops reading
// the stream instead.
func (c *chatClient) cancelTurn(ctx context.Context, id string, stopReading context.CancelFunc) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err := c.orch.CancelTurn(c.auth(cctx), &orchestratorv1.CancelTurnRequest{TurnId: id, UserId: c.user, Reason: "Ctrl-C in hermes chat"})
	if err != nil {
		stopReading()
	}
}
