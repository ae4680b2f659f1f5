package mcpgateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hermes-agent/hermes/internal/errclass"
	"github.com/hermes-agent/hermes/internal/rpc"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// Elicitation in "ask" mode: a server's request for user input is sent to every call of the
// server in flight as Progress.elicitation, and the server's request waits until one of those
// callers answers with AnswerElicitation (through the tool service and the orchestrator: the
// user of the turn), the wait ends, or the server gives up. The id is the capability: 128
// random bits, sent only to the callers that wait. The answer may reach any replica; an
// ElicitRelay carries it to the one that holds the request. A server's sampling request for
// the caller's model (sampling.go) waits for its answer the same way.

// Limits of what passes through: an answer's content (from the user), and the form's schema
// and URL (from the server) shown to the user; a request over them is declined.
const (
	maxElicitContent = 64 << 10
	maxElicitSchema  = 16 << 10
	maxElicitURL     = 2 << 10
	// maxElicitPending is the most requests of one server waiting for answers at once; each
	// holds a subscription and reaches the caller past the progress rate limit.
	maxElicitPending = 4
)

// ElicitRelay carries the answers to servers' requests for a caller (elicitation, sampling)
// between gateway replicas.
type ElicitRelay interface {
	// Listen passes each answer sent to id to deliver until stop is called.
	Listen(id string, deliver func(RelayedAnswer) error) (stop func(), err error)
	// Forward sends an answer to the replica that listens for id; an error wrapping
	// errclass.NotFound when none does.
	Forward(ctx context.Context, id string, a RelayedAnswer) error
}

// RelayedAnswer is an answer on its way to the request it answers, as it crosses replicas.
type RelayedAnswer struct {
	// Kind is what the request is: kindElicitation ("" from replicas older than sampling) or
	// kindSampling. An answer of another kind than the request's is refused as unknown.
	Kind string `json:"kind,omitempty"`
	// Action is an elicitation's action.
	Action string `json:"action,omitempty"`
	// Content is an elicitation's content, or a sampling answer as JSON (samplingAnswer).
	Content string `json:"content,omitempty"`
}

// Kinds of requests that wait for a caller's answer.
const (
	kindElicitation = "elicitation"
	kindSampling    = "sampling"
)

// checkRequestID refuses an answer's id that is not one await could have made (32 lowercase hex
// characters): the id names a NATS subject on its way to the request's replica, where an id of
// any other shape could only ever be unknown.
func checkRequestID(v *rpc.Violations, id string) {
	v.Required("id", id)
	if id == "" {
		return
	}
	if _, err := hex.DecodeString(id); err != nil || len(id) != 32 || strings.ToLower(id) != id {
		v.Add("id", "must be the 32 lowercase hex characters of the request's id")
	}
}

// elicitAnswer is an answer on its way to the waiting request.
type elicitAnswer struct {
	action  string
	content map[string]any
}

// waiter is a request of one kind waiting for its answer on this replica.
type waiter struct {
	kind string
	// check refuses an answer the request cannot take, before it is handed over, so the
	// caller that answered learns why.
	check func(RelayedAnswer) error
	ch    chan RelayedAnswer // capacity one
}

// elicitHub holds the requests for a caller (elicitation and sampling) waiting for an answer
// on this replica.
type elicitHub struct {
	relay ElicitRelay // nil: answers reach only this replica

	mu      sync.Mutex          // guards pending and perConn
	pending map[string]*waiter  // id → the waiting request
	perConn map[*serverConn]int // waiting requests per server connection
}

func newElicitHub(relay ElicitRelay) *elicitHub {
	return &elicitHub{relay: relay, pending: map[string]*waiter{}, perConn: map[*serverConn]int{}}
}

// waitOutcome is how a wait for a caller's answer ended.
type waitOutcome int

const (
	waitNotShown waitOutcome = iota // nobody could be asked
	waitAnswered
	waitExpired   // nobody answered in time
	waitCanceled  // the server's request ended
	waitCallEnded // the call whose caller was asked ended: no answer can come
)

// await registers a request of kind for conn, shows it to the caller with show (which returns
// the function that ends the showing, a channel closed when the caller's call ends, and false
// when nobody can be asked) and waits up to wait for an answer, while the call lasts. A server
// has at most maxElicitPending requests waiting at once.
func (h *elicitHub) await(ctx context.Context, c *serverConn, kind string, check func(RelayedAnswer) error, wait time.Duration,
	show func(id string) (release func(), callEnded <-chan struct{}, ok bool)) (RelayedAnswer, waitOutcome) {
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	id := hex.EncodeToString(raw[:])
	w := &waiter{kind: kind, check: check, ch: make(chan RelayedAnswer, 1)}
	h.mu.Lock()
	if h.perConn[c] >= maxElicitPending {
		h.mu.Unlock()
		return RelayedAnswer{}, waitNotShown
	}
	h.pending[id] = w
	h.perConn[c]++
	h.mu.Unlock()
	// remove ends the request's registration once; an answer delivered before it (deliver sends
	// under mu while the request is registered) is in w.ch afterwards, and taken.
	removed := false
	remove := func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if removed {
			return
		}
		removed = true
		delete(h.pending, id)
		if h.perConn[c]--; h.perConn[c] <= 0 {
			delete(h.perConn, c)
		}
	}
	defer remove()
	if h.relay != nil {
		stop, err := h.relay.Listen(id, func(a RelayedAnswer) error { return h.deliver(id, a) })
		if err != nil {
			c.g.log.Warn("answers from other replicas will not arrive", "server", c.spec.GetName(), "kind", kind, "error", err)
		} else {
			defer stop()
		}
	}
	release, callEnded, ok := show(id)
	if !ok {
		return RelayedAnswer{}, waitNotShown
	}
	defer release()
	t := time.NewTimer(wait)
	defer t.Stop()
	var outcome waitOutcome
	select {
	case a := <-w.ch:
		return a, waitAnswered
	case <-t.C:
		outcome = waitExpired
	case <-ctx.Done():
		outcome = waitCanceled
	case <-callEnded:
		outcome = waitCallEnded
	}
	// An answer its sender was told was accepted is used, even when it came as the wait ended.
	remove()
	select {
	case a := <-w.ch:
		return a, waitAnswered
	default:
		return RelayedAnswer{}, outcome
	}
}

// ask shows the request to the caller of conn's call in flight and waits for an answer. It
// reports false when nobody can answer: no call of conn in flight with someone waiting for it,
// or more than one (the request names none, so it is not shown to a caller it may not be for),
// or maxElicitPending of the server's requests waiting already.
func (h *elicitHub) ask(ctx context.Context, c *serverConn, p *mcp.ElicitParams, msg string, wait time.Duration) (*mcp.ElicitResult, bool) {
	e := &pb.Elicitation{Server: c.spec.GetName(), Message: msg, ExpiresAt: timestamppb.New(time.Now().Add(wait))}
	if p.Mode == "url" {
		if len(p.URL) > maxElicitURL {
			return nil, false
		}
		e.Url = p.URL
	} else if s, err := json.Marshal(p.RequestedSchema); err == nil && p.RequestedSchema != nil {
		if len(s) > maxElicitSchema {
			return nil, false
		}
		e.RequestedSchema = string(s)
	}
	check := func(a RelayedAnswer) error {
		_, err := parseElicitAnswer(a.Action, a.Content)
		return err
	}
	a, outcome := h.await(ctx, c, kindElicitation, check, wait, func(id string) (func(), <-chan struct{}, bool) {
		e.Id = id
		// The call's timeout stands still while a person is asked (up to wait), so the call
		// neither times out for want of an answer nor loses the time the person took.
		release, ended, told := c.g.progress.tell(c, "the server asks for input: "+msg, e)
		if told {
			c.g.log.Info("MCP server asked for user input (elicitation); passed to the caller", "server", c.spec.GetName(), "elicitation", id, "message", abbreviate(msg, 200))
		}
		return release, ended, told
	})
	switch outcome {
	case waitAnswered:
		ea, err := parseElicitAnswer(a.Action, a.Content)
		if err != nil { // checked on delivery; kept for safety
			return &mcp.ElicitResult{Action: "decline"}, true
		}
		c.g.log.Info("elicitation answered", "server", c.spec.GetName(), "elicitation", e.Id, "action", ea.action)
		return &mcp.ElicitResult{Action: ea.action, Content: ea.content}, true
	case waitExpired:
		c.g.progress.broadcast(c, "nobody answered the server's request for input in time; declined")
		return &mcp.ElicitResult{Action: "decline", Meta: mcp.Meta{"reason": fmt.Sprintf("nobody answered within %s", wait)}}, true
	case waitCanceled, waitCallEnded:
		return &mcp.ElicitResult{Action: "cancel"}, true
	}
	return nil, false
}

// answer delivers an answer to the request id, here or through the relay.
func (h *elicitHub) answer(ctx context.Context, id string, a RelayedAnswer) error {
	err := h.deliver(id, a)
	if errors.Is(err, errclass.NotFound) && h.relay != nil {
		return h.relay.Forward(ctx, id, a)
	}
	return err
}

// deliver hands an answer to the request id waiting on this replica, when it is of the
// request's kind and the request can take it.
func (h *elicitHub) deliver(id string, a RelayedAnswer) error {
	if a.Kind == "" {
		a.Kind = kindElicitation
	}
	h.mu.Lock()
	w, ok := h.pending[id]
	h.mu.Unlock()
	if !ok || w.kind != a.Kind {
		return errclass.Errorf(errclass.NotFound, "%s %s: nothing waits for it (answered, expired, or unknown)", a.Kind, id)
	}
	if err := w.check(a); err != nil {
		return err
	}
	// Sent while the request is still registered, so that await, which ends the registration
	// before it gives up, finds every answer accepted here.
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pending[id] != w {
		return errclass.Errorf(errclass.NotFound, "%s %s: nothing waits for it (answered, expired, or unknown)", a.Kind, id)
	}
	select {
	case w.ch <- a:
		return nil
	default:
		return errclass.Errorf(errclass.NotFound, "%s %s was answered already", a.Kind, id)
	}
}

// parseElicitAnswer checks an answer: a known action; with accept, content (when given) is a
// JSON object of primitive values, as MCP elicitation forms are.
func parseElicitAnswer(action, content string) (elicitAnswer, error) {
	switch action {
	case "accept", "decline", "cancel":
	default:
		return elicitAnswer{}, errclass.Errorf(errclass.Invalid, `action: must be "accept", "decline" or "cancel"`)
	}
	a := elicitAnswer{action: action}
	if action != "accept" || content == "" {
		return a, nil
	}
	if len(content) > maxElicitContent {
		return elicitAnswer{}, errclass.Errorf(errclass.Invalid, "content: longer than %d bytes", maxElicitContent)
	}
	if err := json.Unmarshal([]byte(content), &a.content); err != nil || a.content == nil {
		return elicitAnswer{}, errclass.Errorf(errclass.Invalid, "content: must be a JSON object")
	}
	for k, v := range a.content {
		switch v.(type) {
		case string, float64, bool:
		case []any: // multi-select enums
		default:
			return elicitAnswer{}, errclass.Errorf(errclass.Invalid, "content.%s: must be a string, number, boolean or list of strings", k)
		}
	}
	return a, nil
}

// NATSElicitRelay carries answers over NATS request-reply: the replica holding a request
// subscribes to prefix.<id> while it waits.
type NATSElicitRelay struct {
	nc     *nats.Conn
	prefix string
}

// NewNATSElicitRelay returns a relay on nc, under the subject prefix.
func NewNATSElicitRelay(nc *nats.Conn, prefix string) *NATSElicitRelay {
	return &NATSElicitRelay{nc: nc, prefix: prefix}
}

// Listen implements ElicitRelay.
func (r *NATSElicitRelay) Listen(id string, deliver func(RelayedAnswer) error) (func(), error) {
	sub, err := r.nc.Subscribe(r.prefix+"."+id, func(m *nats.Msg) {
		var a RelayedAnswer
		reply := ""
		if err := json.Unmarshal(m.Data, &a); err != nil {
			reply = "invalid answer"
		} else if err := deliver(a); err != nil {
			reply = err.Error()
		}
		_ = m.Respond([]byte(reply))
	})
	if err != nil {
		return nil, err
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// Forward implements ElicitRelay.
func (r *NATSElicitRelay) Forward(ctx context.Context, id string, a RelayedAnswer) error {
	data, _ := json.Marshal(a)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := r.nc.RequestWithContext(rctx, r.prefix+"."+id, data)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return errclass.Errorf(errclass.NotFound, "%s %s: nothing waits for it (answered, expired, or unknown)", kindOf(a), id)
	case err != nil:
		return errclass.Mark(errclass.Unavailable, "forwarding the answer to "+kindOf(a)+" "+id, err)
	case len(m.Data) > 0:
		return errclass.Errorf(errclass.NotFound, "%s %s: %s", kindOf(a), id, m.Data)
	}
	return nil
}

func kindOf(a RelayedAnswer) string {
	if a.Kind == "" {
		return kindElicitation
	}
	return a.Kind
}

// accountConnected is the announcement on Names.AccountConnected; Origin names the replica
// that sent it, which has told its own endpoint already.
type accountConnected struct {
	Server string `json:"server"`
	User   string `json:"user"`
	Origin string `json:"origin,omitempty"`
}

// maxAnnouncedName bounds the server and user names an announcement may carry (a user id is at
// most 256 bytes wherever Hermes takes one; server names are shorter).
const maxAnnouncedName = 256

// AnnounceConnected tells every replica listening on subject (ListenConnected) that user has
// connected their account on server; origin names the announcing replica, whose listener skips
// it (that replica tells its own endpoint directly, whether NATS is up or not). Core NATS: a
// replica not connected at that moment misses it, and its clients call again when the user
// tells them to.
func (r *NATSElicitRelay) AnnounceConnected(subject, origin, server, user string) error {
	data, err := json.Marshal(accountConnected{Server: server, User: user, Origin: origin})
	if err != nil {
		return err
	}
	return r.nc.Publish(subject, data)
}

// ListenConnected calls fn, on NATS's delivery goroutine, for each announcement on subject that
// names a server and a user of sane size and comes from another replica than origin; it
// returns the function that stops listening.
func (r *NATSElicitRelay) ListenConnected(subject, origin string, fn func(server, user string)) (func(), error) {
	sub, err := r.nc.Subscribe(subject, func(m *nats.Msg) {
		var a accountConnected
		if json.Unmarshal(m.Data, &a) != nil || a.Server == "" || a.User == "" || len(a.Server) > maxAnnouncedName || len(a.User) > maxAnnouncedName ||
			(origin != "" && a.Origin == origin) {
			return
		}
		fn(a.Server, a.User)
	})
	if err != nil {
		return nil, err
	}
	// The server has the subscription once it answered a ping: announcements after this
	// returns are heard.
	if err := r.nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	return func() { _ = sub.Unsubscribe() }, nil
}
