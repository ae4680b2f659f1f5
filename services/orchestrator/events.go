package orchestrator

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hermes-agent/hermes/internal/model"
	eventsv1 "github.com/hermes-agent/hermes/proto/hermes/events/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// Bounds of a turn.finished event: the extractor needs the gist of each message, and NATS
// refuses payloads above its limit (1 MiB by default).
const (
	maxEventBytes        = 256 << 10
	maxEventMessageBytes = 16 << 10
)

// clipBytes cuts text to at most n bytes on a character boundary, ending with a note of what
// was cut (the session's log keeps the whole text).
func clipBytes(text string, n int) string {
	if len(text) <= n {
		return text
	}
	note := fmt.Sprintf("\n[… %d of %d bytes cut here; the session log has the whole message]", len(text), len(text))
	keep := max(n-len(note), 0)
	for keep > 0 && !utf8.RuneStart(text[keep]) {
		keep--
	}
	return text[:keep] + fmt.Sprintf("\n[… %d of %d bytes cut here; the session log has the whole message]", len(text)-keep, len(text))
}

// rememberCue finds a request to remember something, which lets the extractor use tool results.
var rememberCue = regexp.MustCompile(`(?i)\bremember\b|记住|记下|别忘|記住|記下`)

// emitter numbers events, sends them to the client and keeps them for the turn record. The
// events before the final one are sent, in order, by a goroutine of their own (sender), so
// that the turn does not wait for the stream's sends (encoding, framing) on its way to the
// final event; the final event is sent by the turn once they were (send).
type emitter struct {
	// mu guards seq, events, gone, holding, queue, out, sending, busy, joined and join.
	mu     sync.Mutex
	seq    int32
	sendFn func(*orchestratorv1.TurnEvent) error
	events []*orchestratorv1.TurnEvent
	gone   bool
	// holding says events are queued rather than sent, until release: nothing reaches the
	// client before the turn's RUNNING record is stored.
	holding bool
	queue   []*orchestratorv1.TurnEvent
	// out is what the sender is to send next; sending says a sender goroutine runs (it ends
	// when out is empty or the final event went out); busy, while the sender sends a batch it
	// took from out, is closed when that batch was sent.
	out     []*orchestratorv1.TurnEvent
	sending bool
	busy    chan struct{}
	// joined is the waiting text delta that later deltas joined (coalesce), and join its text
	// so far: the event gets it (flush) before it goes out or into the record, so that joining
	// many small deltas copies each once.
	joined *orchestratorv1.TextDelta
	join   strings.Builder
}

// emit numbers an event, keeps it and sends it (or queues it, while holding). A text delta
// that finds the previous delta of its step still waiting to go out joins it (coalesce).
func (e *emitter) emit(ev *orchestratorv1.TurnEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.coalesce(ev) {
		return
	}
	e.add(ev)
	if e.holding {
		e.queue = append(e.queue, ev)
		return
	}
	e.deliver(ev)
}

// holdBack keeps first, and queues the events emitted after it, until release sends them in
// order.
func (e *emitter) holdBack(first *orchestratorv1.TurnEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.add(first)
	e.holding = true
	e.queue = append(e.queue, first)
}

// release sends the events queued since holdBack and sends the next ones at once.
func (e *emitter) release() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.holding = false
	for _, ev := range e.queue {
		e.deliver(ev)
	}
	e.queue = nil
}

// hold numbers and keeps an event without sending it yet: the final event is in the turn
// record, which is stored before the event is sent.
func (e *emitter) hold(ev *orchestratorv1.TurnEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.add(ev)
}

// send sends the final event, which hold kept, once the events before it were sent; nothing
// is sent after it (the stream ends with it). It waits for the batch the sender is sending;
// what the sender has not taken yet it sends itself rather than wait for the sender to run.
func (e *emitter) send(ev *orchestratorv1.TurnEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for e.busy != nil {
		busy := e.busy
		e.mu.Unlock()
		<-busy
		e.mu.Lock()
	}
	e.flush()
	for _, q := range append(e.out, ev) {
		if !e.gone && e.sendFn(q) != nil {
			e.gone = true
		}
	}
	e.out = nil
	e.gone = true // a sender still to run finds nothing to do
}

// coalesce appends a text delta to the turn's last event when that is a delta of the same
// step that has not gone to the client yet: held back before the RUNNING record, or not yet
// taken by the sender. A client that reads slower than the model streams then gets fewer,
// longer deltas with the same text, and every event sent still has the next seq; a model that
// streams slower than the client reads is passed on delta by delta. e.mu is held.
func (e *emitter) coalesce(ev *orchestratorv1.TurnEvent) bool {
	d := ev.GetDelta()
	if d == nil || len(e.events) == 0 {
		return false
	}
	last := e.events[len(e.events)-1]
	prev := last.GetDelta()
	if prev == nil || prev.GetStep() != d.GetStep() {
		return false
	}
	waiting := e.out
	if e.holding {
		waiting = e.queue
	}
	if len(waiting) == 0 || waiting[len(waiting)-1] != last {
		return false
	}
	if e.joined != prev {
		e.flush()
		e.joined = prev
		e.join.WriteString(prev.GetText())
	}
	e.join.WriteString(d.GetText())
	return true
}

// flush gives the joined delta its text; e.mu is held.
func (e *emitter) flush() {
	if e.joined != nil {
		e.joined.Text = e.join.String()
		e.joined, e.join = nil, strings.Builder{}
	}
}

func (e *emitter) add(ev *orchestratorv1.TurnEvent) {
	e.seq++
	ev.Seq = e.seq
	ev.Time = timestamppb.Now()
	e.events = append(e.events, ev)
}

// deliver hands ev to the sender, starting it when it does not run; e.mu is held.
func (e *emitter) deliver(ev *orchestratorv1.TurnEvent) {
	if e.gone {
		return
	}
	e.out = append(e.out, ev)
	if !e.sending {
		e.sending = true
		go e.sender()
	}
}

// sender sends what deliver handed over, in order, until there is nothing left.
func (e *emitter) sender() {
	for {
		e.mu.Lock()
		if len(e.out) == 0 || e.gone {
			e.out, e.sending = nil, false
			e.mu.Unlock()
			return
		}
		e.flush()
		batch, busy := e.out, make(chan struct{})
		e.out, e.busy = nil, busy
		e.mu.Unlock()
		gone := false
		for _, ev := range batch {
			if err := e.sendFn(ev); err != nil {
				// The client went away; its context is cancelled, which ends the turn.
				gone = true
				break
			}
		}
		e.mu.Lock()
		e.gone = e.gone || gone
		e.busy = nil
		close(busy)
		e.mu.Unlock()
	}
}

// recorded returns the events for the turn record, with consecutive text deltas of a step
// merged so that a long answer is not stored token by token.
func (e *emitter) recorded() []*orchestratorv1.TurnEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.flush()
	var out []*orchestratorv1.TurnEvent
	for _, ev := range e.events {
		if d := ev.GetDelta(); d != nil && len(out) > 0 {
			if prev := out[len(out)-1].GetDelta(); prev != nil && prev.GetStep() == d.GetStep() {
				prev.Text += d.GetText()
				continue
			}
			ev = proto.Clone(ev).(*orchestratorv1.TurnEvent)
		}
		out = append(out, ev)
	}
	return out
}

// usageAcc sums the usage of a turn's model calls.
type usageAcc struct {
	u         orchestratorv1.Usage
	estimated bool
}

// add counts one call: the provider's usage when it reported one, else the tokenizer's counts.
func (a *usageAcc) add(u model.Usage, promptEstimate, completionEstimate int) {
	a.u.ModelCalls++
	if !u.Reported {
		a.estimated = true
		a.u.PromptTokens += int64(promptEstimate)
		a.u.CompletionTokens += int64(completionEstimate)
		a.u.TotalTokens += int64(promptEstimate + completionEstimate)
		return
	}
	a.u.PromptTokens += int64(u.PromptTokens)
	a.u.CompletionTokens += int64(u.CompletionTokens)
	a.u.CachedTokens += int64(u.CachedTokens)
	total := u.TotalTokens
	if total == 0 {
		total = u.PromptTokens + u.CompletionTokens
	}
	a.u.TotalTokens += int64(total)
}

func (a *usageAcc) proto() *orchestratorv1.Usage {
	u := proto.Clone(&a.u).(*orchestratorv1.Usage)
	u.Source = "provider"
	if a.estimated {
		u.Source = "tokenizer"
	}
	if u.ModelCalls == 0 {
		u.Source = ""
	}
	return u
}

// record is the turn's record as it stands, in status st.
func (t *turn) record(st orchestratorv1.TurnStatus) *orchestratorv1.Turn {
	t.mu.Lock()
	rec := &orchestratorv1.Turn{
		Id: t.id, SessionId: t.session, UserId: t.user, Status: st, Text: t.text, Answer: t.answer,
		Usage: t.usage.proto(), ToolCalls: append([]*orchestratorv1.ToolCallRecord(nil), t.toolCalls...),
		StartedAt: timestamppb.New(t.started),
	}
	t.mu.Unlock()
	rec.Events = t.em.recorded()
	if st != orchestratorv1.TurnStatus_TURN_STATUS_RUNNING {
		rec.FinishedAt = timestamppb.New(t.s.now())
	}
	return rec
}

// finishedEvent is the turn's turn.finished event: its stored messages (and the recalled
// memories it was given) for the memory extractor.
func (t *turn) finishedEvent(ctx context.Context) *eventsv1.TurnFinished {
	ev := &eventsv1.TurnFinished{
		TurnId: t.id, SessionId: t.session, UserId: t.user, FinishedAt: timestamppb.New(t.s.now()),
		RememberRequested: rememberCue.MatchString(t.text),
	}
	if t.memText != "" {
		ev.Messages = append(ev.Messages, &eventsv1.TurnMessage{
			Message:          &sessionv1.Message{Role: sessionv1.Role_ROLE_SYSTEM, Kind: sessionv1.MessageKind_MESSAGE_KIND_TEXT, Content: t.memText},
			IsRecalledMemory: true,
		})
	}
	t.mu.Lock()
	// The event stays well within NATS's payload limit: each message's text gets an equal share
	// of maxEventBytes (at most maxEventMessageBytes).
	share := maxEventMessageBytes
	if n := len(t.stored); n > 0 {
		share = max(min(share, maxEventBytes/n), 256)
	}
	for _, m := range t.stored {
		if len(m.GetContent()) > share {
			m = proto.CloneOf(m)
			m.Content = clipBytes(m.GetContent(), share)
		}
		ev.Messages = append(ev.Messages, &eventsv1.TurnMessage{Message: m, IsToolResult: m.GetKind() == sessionv1.MessageKind_MESSAGE_KIND_TOOL_RESULT})
	}
	t.mu.Unlock()
	for _, r := range t.memories {
		ev.RecalledMemoryIds = append(ev.RecalledMemoryIds, r.GetMemory().GetId())
	}
	carrier := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(ctx, carrier)
	propagation.TraceContext{}.Inject(ctx, carrier)
	ev.Traceparent = carrier.Get("traceparent")
	return ev
}
