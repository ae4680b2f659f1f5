package memory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-agent/hermes/internal/backoff"
	"github.com/hermes-agent/hermes/internal/events"
	"github.com/hermes-agent/hermes/internal/workpool"
	eventsv1 "github.com/hermes-agent/hermes/proto/hermes/events/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

// Consumer is the memory extractor on NATS JetStream: the durable pull consumer
// memory-extractor on turn.finished, shared by every replica (JetStream hands each event to one
// of them). An event is acknowledged only after its memories and its turn record are written;
// a failure is retried with backoff up to memory.consumer-max-deliver deliveries, and the last
// failing delivery — or an event that cannot be decoded at all — is published to
// hermes.dlq.<subject> and terminated.
type Consumer struct {
	svc   *Service
	js    jetstream.JetStream
	names events.Names
	// keys verify each event's proof of origin (events.Keyring).
	keys *events.Keyring
	cfg  Config
	log  *slog.Logger

	cc  jetstream.ConsumeContext
	sem chan struct{}
	// pool runs the extractions, one a message, at most len(sem) at once.
	pool   *workpool.Pool
	wg     sync.WaitGroup
	ctx    context.Context
	cancel context.CancelFunc

	// stopMu orders wg.Add in dispatch before wg.Wait in Stop: the consume callback can still
	// run after cc.Stop returns. It guards stopping.
	stopMu   sync.Mutex
	stopping bool
}

// Dead-letter headers.
const (
	HeaderError        = "Hermes-Error"
	HeaderDelivered    = "Hermes-Num-Delivered"
	HeaderOriginalSeq  = "Hermes-Stream-Seq"
	HeaderOriginalSubj = "Hermes-Original-Subject"
)

// StartConsumer creates the durable consumer, or updates it where its settings differ, and
// starts consuming. Events that keys cannot verify, or whose subject is not their user's, write
// nothing: they are dead-lettered.
func StartConsumer(ctx context.Context, svc *Service, js jetstream.JetStream, names events.Names, keys *events.Keyring, log *slog.Logger) (*Consumer, error) {
	if keys == nil {
		return nil, errors.New("memory extractor: no events key to verify turn.finished with")
	}
	cfg := svc.cfg
	workers := max(cfg.ConsumerWorkers, 1)
	want := jetstream.ConsumerConfig{
		Durable:       names.ExtractorConsumer,
		Description:   "Hermes memory extractor: explicit extraction from finished turns",
		FilterSubject: names.TurnFinishedFilter(),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.ConsumerAckWait,
		MaxDeliver:    max(cfg.ConsumerMaxDeliver, 1),
		MaxAckPending: workers * 16,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	var cons jetstream.Consumer
	err := events.RetryStartup(ctx, func() error {
		// Replicas starting together find the consumer as they want it and send no update.
		var err error
		cons, err = js.Consumer(ctx, names.Stream, want.Durable)
		switch {
		case err == nil && consumerSettled(cons.CachedInfo().Config, want):
			return nil
		case err == nil, errors.Is(err, jetstream.ErrConsumerNotFound):
			cons, err = js.CreateOrUpdateConsumer(ctx, names.Stream, want)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("memory extractor consumer: %w", err)
	}
	c := &Consumer{svc: svc, js: js, names: names, keys: keys, cfg: cfg, log: log, sem: make(chan struct{}, workers), pool: workpool.New(workers)}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.cc, err = cons.Consume(c.dispatch,
		// Messages buffered in the client age towards their ack wait: fetch only what the
		// workers can start on.
		jetstream.PullMaxMessages(workers),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if !errors.Is(err, jetstream.ErrNoHeartbeat) {
				log.Warn("memory extractor consumer", "error", err)
			}
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("memory extractor consume: %w", err)
	}
	log.Info("memory extractor consuming", "stream", names.Stream, "consumer", names.ExtractorConsumer, "subject", names.TurnFinishedFilter(), "workers", workers)
	return c, nil
}

// consumerSettled reports whether have has the settings of want that extraction depends on:
// what it receives, how it acknowledges and redelivers, and how many it may hold at once.
func consumerSettled(have, want jetstream.ConsumerConfig) bool {
	filter := have.FilterSubject
	if filter == "" && len(have.FilterSubjects) == 1 {
		filter = have.FilterSubjects[0]
	}
	return filter == want.FilterSubject &&
		have.AckPolicy == want.AckPolicy &&
		have.AckWait == want.AckWait &&
		have.MaxDeliver == want.MaxDeliver &&
		have.MaxAckPending == want.MaxAckPending &&
		have.DeliverPolicy == want.DeliverPolicy
}

// dispatch runs in the consume goroutine. It checks the event (open) and acknowledges one
// that needs no extraction itself — a turn that did not complete, or one the prefilter skips:
// most turns, and a few tens of microseconds each. Such an event then costs no hand-off to a
// worker and back, and takes no worker's place from a turn that waits for the model. Everything
// else goes to a worker (blocking while every worker is busy): an event to extract, and one
// that failed a check, which the worker refuses or dead-letters.
func (c *Consumer) dispatch(msg jetstream.Msg) {
	md, ev, reject := c.open(msg)
	if reject == nil && c.skips(ev) {
		if err := msg.Ack(); err != nil {
			c.log.Warn("memory extractor: ack", "turn", ev.GetTurnId(), "error", err)
		}
		return
	}
	select {
	case c.sem <- struct{}{}:
	case <-c.ctx.Done():
		return // not acknowledged: JetStream redelivers it
	}
	c.stopMu.Lock()
	if c.stopping {
		c.stopMu.Unlock()
		<-c.sem
		return // not acknowledged: another replica, or this one after a restart, gets it
	}
	c.wg.Add(1)
	c.stopMu.Unlock()
	c.pool.Go(func() {
		defer func() { <-c.sem; c.wg.Done() }()
		if reject != nil {
			reject()
			return
		}
		c.handle(msg, md, ev)
	})
}

// open reads a delivery's metadata and its event, verified and decoded. A delivery that fails
// a check comes back with reject, which settles it: terminated (no metadata), refused (not
// authentic, or on another user's subject) or dead-lettered (undecodable); nothing is written.
func (c *Consumer) open(msg jetstream.Msg) (md *jetstream.MsgMetadata, ev *eventsv1.TurnFinished, reject func()) {
	md, err := msg.Metadata()
	if err != nil {
		return nil, nil, func() {
			c.log.Warn("memory extractor: message without metadata", "error", err)
			_ = msg.Term()
		}
	}
	if err := c.keys.Verify(msg.Subject(), msg.Headers(), msg.Data(), time.Now()); err != nil {
		return md, nil, func() { c.refuse(msg, md, err) }
	}
	ev, err = events.UnmarshalTurnFinished(msg.Data())
	if err != nil {
		return md, nil, func() { c.deadLetter(msg, md, fmt.Errorf("undecodable event: %w", err)) }
	}
	// The signature binds the subject; the subject must name the payload's user, or a signed
	// event of one user could carry another user's id.
	if want := c.names.TurnFinishedSubject(ev.GetUserId()); msg.Subject() != want {
		return md, nil, func() {
			c.refuse(msg, md, fmt.Errorf("%w: subject %s does not belong to the event's user (want %s)", events.ErrUnauthenticEvent, msg.Subject(), want))
		}
	}
	return md, ev, nil
}

// skips reports whether an authentic event needs no extraction: its turn did not complete, or
// the prefilter skips it.
func (c *Consumer) skips(ev *eventsv1.TurnFinished) bool {
	if !extractable(ev) {
		c.log.Debug("memory extractor: skipping a turn that did not complete", "turn", ev.GetTurnId(), "status", ev.GetStatus())
		return true
	}
	return c.svc.prefiltered(c.ctx, ev, turnMaterial(ev))
}

// handle extracts the memories of an authentic event (open) and acknowledges it, or has it
// redelivered or dead-lettered when extraction fails.
func (c *Consumer) handle(msg jetstream.Msg, md *jetstream.MsgMetadata, ev *eventsv1.TurnFinished) {
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	// Keep the delivery alive while a slow model answers.
	alive := keepAlive(msg, max(c.cfg.ConsumerAckWait/3, 100*time.Millisecond))
	_, err := c.svc.extract(ctx, ev)
	// Another worker holds the turn (a redelivery racing a slow worker, or the claim of a
	// worker that died, until its lease ends). Wait here, keeping the delivery alive, rather
	// than spend deliveries on it.
	for attempt := 0; errors.Is(err, errTurnBusy); attempt++ {
		if !backoff.Sleep(ctx, busyRetry.Delay(attempt)) {
			alive.stop()
			return
		}
		_, err = c.svc.extract(ctx, ev)
	}
	alive.stop()
	switch {
	case err == nil:
		// Not waiting for the server's confirmation (DoubleAck): the turn record is written, so
		// the redelivery of a lost ack is a no-op.
		if aerr := msg.Ack(); aerr != nil {
			c.log.Warn("memory extractor: ack", "turn", ev.GetTurnId(), "error", aerr)
		}
	case c.ctx.Err() != nil:
		// Shutting down: leave the event unacknowledged for another replica.
	case md.NumDelivered >= uint64(max(c.cfg.ConsumerMaxDeliver, 1)):
		c.deadLetter(msg, md, err)
	default:
		delay := c.redelivery().Delay(int(min(md.NumDelivered, 64)) - 1) // #nosec G115 -- capped at 64
		c.log.Warn("memory extraction failed; will retry", "turn", ev.GetTurnId(), "delivery", md.NumDelivered, "retry_in", delay, "error", err)
		_ = msg.NakWithDelay(delay)
	}
}

// progress tells JetStream, every period until stop, that a delivery is still being worked on
// (an in-progress ack, which restarts its ack wait). A timer rather than a goroutine per event:
// the event's extraction is usually over long before the first period ends, and a goroutine
// cost a start and a wake-up on every event.
type progress struct {
	mu      sync.Mutex
	t       *time.Timer
	stopped bool
}

// keepAlive starts the in-progress acks of msg.
func keepAlive(msg jetstream.Msg, period time.Duration) *progress {
	p := &progress{}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.t = time.AfterFunc(period, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.stopped {
			return
		}
		_ = msg.InProgress()
		p.t.Reset(period)
	})
	return p
}

// stop ends the in-progress acks: none is sent once stop has returned, so none follows the
// delivery's ack, nak or termination.
func (p *progress) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	p.t.Stop()
}

// busyRetry spaces the tries of a turn another worker holds.
var busyRetry = backoff.Policy{Initial: 250 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.2}

// redelivery spaces the deliveries of a failed event: ConsumerRetryBackoff doubling per delivery
// up to 10 minutes, spread so that the events of one outage are not all redelivered at once.
func (c *Consumer) redelivery() backoff.Policy {
	return backoff.Policy{Initial: max(c.cfg.ConsumerRetryBackoff, 10*time.Millisecond), Max: 10 * time.Minute, Jitter: 0.2}
}

// refuse dead-letters an event that is not authentic, with a warning: someone with access to
// NATS published it, or a publisher has another events key.
func (c *Consumer) refuse(msg jetstream.Msg, md *jetstream.MsgMetadata, cause error) {
	c.log.Warn("memory extractor: refusing an event that is not authentic; nothing written (check that orchestrator and memory share --events-key-file, and who can publish on NATS)",
		"subject", msg.Subject(), "seq", md.Sequence.Stream, "error", cause)
	c.deadLetter(msg, md, cause)
}

// deadLetter publishes the event unchanged to hermes.dlq.<subject> with why, then terminates
// it. The publish is de-duplicated by stream sequence, so a retried dead-lettering stores one
// copy.
func (c *Consumer) deadLetter(msg jetstream.Msg, md *jetstream.MsgMetadata, cause error) {
	c.log.Error("memory extractor: dead-lettering event", "subject", msg.Subject(), "seq", md.Sequence.Stream, "delivered", md.NumDelivered, "error", cause)
	out := nats.NewMsg(c.names.DeadLetterSubject(msg.Subject()))
	out.Data = msg.Data()
	out.Header.Set(HeaderError, truncate(cause.Error(), 1000))
	out.Header.Set(HeaderDelivered, strconv.FormatUint(md.NumDelivered, 10))
	out.Header.Set(HeaderOriginalSeq, strconv.FormatUint(md.Sequence.Stream, 10))
	out.Header.Set(HeaderOriginalSubj, msg.Subject())
	// The proof of origin travels along, so an event replayed to its original subject is
	// verified again.
	for _, h := range []string{events.HeaderSignature, events.HeaderSignedAt} {
		if v := msg.Headers().Get(h); v != "" {
			out.Header.Set(h, v)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.js.PublishMsg(ctx, out, jetstream.WithMsgID("dlq-"+strconv.FormatUint(md.Sequence.Stream, 10))); err != nil {
		// Not terminated: JetStream redelivers it, and dead-lettering is tried again.
		c.log.Error("memory extractor: dead-letter publish failed", "error", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	if err := msg.TermWithReason(truncate(cause.Error(), 200)); err != nil {
		c.log.Warn("memory extractor: term", "error", err)
	}
}

// Stop stops fetching, lets in-flight extractions finish (up to timeout), and returns. An
// extraction still running after that is cancelled and its event left unacknowledged.
func (c *Consumer) Stop(timeout time.Duration) {
	c.cc.Stop()
	c.stopMu.Lock()
	c.stopping = true
	c.stopMu.Unlock()
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		c.cancel()
		<-done
	}
	c.cancel()
	c.pool.Stop()
}

// kill stops at once without finishing anything (tests: a replica that dies mid-batch).
func (c *Consumer) kill() {
	c.cancel()
	c.cc.Stop()
	c.pool.Stop()
}

// extractable reports whether memories are extracted from a finished turn: only a completed one
// (a failed, cancelled or interrupted turn's messages are not what the user settled on).
// UNSPECIFIED is an event of a release that did not say, which counts as completed.
func extractable(ev *eventsv1.TurnFinished) bool {
	switch ev.GetStatus() {
	case orchestratorv1.TurnStatus_TURN_STATUS_UNSPECIFIED, orchestratorv1.TurnStatus_TURN_STATUS_COMPLETED:
		return true
	}
	return false
}
