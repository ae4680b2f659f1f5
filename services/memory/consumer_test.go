package memory

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hermes-agent/hermes/internal/events"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	"github.com/hermes-agent/hermes/internal/testenv"
	eventsv1 "github.com/hermes-agent/hermes/proto/hermes/events/v1"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

// testNATS connects to the real NATS JetStream at 127.0.0.1:4222 with a namespace of its own;
// an unreachable NATS fails the test.
func testNATS(t *testing.T) (events.Names, func() (*nats.Conn, jetstream.JetStream)) {
	t.Helper()
	names := events.NamespacedNames("mem" + randomToken()[:10])
	connect := func() (*nats.Conn, jetstream.JetStream) {
		nc, js, err := events.Connect("nats://127.0.0.1:4222", "memory-test", testLogger())
		if err != nil {
			t.Fatalf("NATS at 127.0.0.1:4222 is required: %v", err)
		}
		t.Cleanup(nc.Close)
		return nc, js
	}
	_, js := connect()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := events.EnsureStream(ctx, js, names); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), names.Stream) })
	return names, connect
}

// testKeyring is the events key the tests' publishers and consumers share.
func testKeyring(t *testing.T) *events.Keyring {
	t.Helper()
	k, err := events.ParseKeyring("memory-test-events-key-0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// replicaStores are stores shared by several service replicas (Redis + Qdrant).
type replicaStores struct {
	ep, sem TierStore
	state   StateStore
}

func sharedStores(t *testing.T, dim int) replicaStores {
	rdb, prefix := testenv.Redis(t)
	qc, coll := testQdrant(t)
	qs, err := NewQdrantSemantic(context.Background(), qc, coll, dim)
	if err != nil {
		t.Fatal(err)
	}
	return replicaStores{ep: NewRedisEpisodic(rdb, prefix, time.Hour, dim), sem: qs, state: NewRedisState(rdb, prefix)}
}

func newReplica(t *testing.T, st replicaStores, cfg Config, mc Completer) *Service {
	t.Helper()
	svc, err := NewService(cfg, Options{Episodic: st.ep, Semantic: st.sem, State: st.state, Embedder: NewLexicalEmbedder(cfg.LexicalDimensions), Model: mc, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	return svc
}

func consumerConfig() Config {
	cfg := DefaultConfig()
	cfg.MaintenanceInterval = 0
	cfg.ConsumerAckWait = time.Second
	cfg.ConsumerMaxDeliver = 3
	cfg.ConsumerRetryBackoff = 100 * time.Millisecond
	cfg.ExtractTimeout = 1500 * time.Millisecond
	return cfg
}

// oneMemoryPerTurn answers every turn with one memory naming the turn's marker word.
func oneMemoryPerTurn(calls *atomic.Int64) scripted.Handler {
	return func(req scripted.Request) scripted.Reply {
		calls.Add(1)
		p := req.LastUser()
		i := strings.Index(p, "爱好编号")
		if i < 0 {
			return scripted.Text(`{"memories":[]}`)
		}
		marker := strings.Fields(p[i:])[0]
		return scripted.Text(memoriesJSON(map[string]any{"type": "fact", "content": "用户的" + marker, "confidence": 0.95}))
	}
}

func publishTurns(t *testing.T, js jetstream.JetStream, names events.Names, user string, n int) []*eventsv1.TurnFinished {
	t.Helper()
	var out []*eventsv1.TurnFinished
	for i := range n {
		tf := turn(user, "s", userSays(fmt.Sprintf("记住我的爱好编号%03d号是第%d种", i*37+11, i)))
		if err := events.PublishTurnFinished(ctxT(t), js, names, tf, events.SignWith(testKeyring(t))); err != nil {
			t.Fatal(err)
		}
		out = append(out, tf)
	}
	return out
}

func listAll(t *testing.T, svc *Service, user string) []*memoryv1.Memory {
	t.Helper()
	page, _, err := svc.list(context.Background(), listParams{userID: user, pageSize: 1000, includeExpired: true})
	if err != nil {
		t.Fatal(err)
	}
	return page
}

func TestConsumerExtractsPublishedTurn(t *testing.T) {
	names, connect := testNATS(t)
	var calls atomic.Int64
	mc, _ := scriptedModel(t, oneMemoryPerTurn(&calls))
	st := sharedStores(t, 0)
	svc := newReplica(t, st, consumerConfig(), mc)
	_, js := connect()
	c, err := StartConsumer(ctxT(t), svc, js, names, testKeyring(t), testLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(5 * time.Second)
	publishTurns(t, js, names, "pub-user.with.dots", 1)
	testenv.WaitFor(t, 15*time.Second, "the extracted memory", func() bool { return len(listAll(t, svc, "pub-user.with.dots")) == 1 })
	m := listAll(t, svc, "pub-user.with.dots")[0]
	if !strings.HasPrefix(m.GetContent(), "用户的爱好编号011号") || m.GetSource() != memoryv1.Source_SOURCE_EXPLICIT {
		t.Errorf("memory: %v", m)
	}
	// Acknowledged: nothing pending on the durable consumer.
	waitExtractor(t, js, names, "the ack", func(info *jetstream.ConsumerInfo) bool {
		return info.NumAckPending == 0 && info.NumPending == 0
	})
}

// A replica killed mid-batch — after writing memories of turns it never acknowledged — loses no
// event and, after redelivery to the surviving replica, leaves no duplicate.
func TestConsumerKilledMidBatchLosesNothingAndDuplicatesNothing(t *testing.T) {
	names, connect := testNATS(t)
	var calls atomic.Int64
	mc, _ := scriptedModel(t, oneMemoryPerTurn(&calls))
	cfg := consumerConfig()
	cfg.ConsumerWorkers = 3
	st := sharedStores(t, 0)

	victim := newReplica(t, st, cfg, mc)
	var stuck atomic.Int64
	release := make(chan struct{})
	victim.beforeFinish = func(ctx context.Context, _ string) {
		// After the third turn, the victim writes memories and then hangs before recording the
		// turn or acknowledging it, until it is killed.
		if stuck.Add(1) > 2 {
			select {
			case <-ctx.Done():
			case <-release:
			}
		}
	}
	defer close(release)
	ncV, jsV := connect()
	cV, err := StartConsumer(ctxT(t), victim, jsV, names, testKeyring(t), testLogger())
	if err != nil {
		t.Fatal(err)
	}
	_, js := connect()
	const n = 12
	turns := publishTurns(t, js, names, "batch", n)
	testenv.WaitFor(t, 20*time.Second, "the victim to be mid-batch", func() bool { return stuck.Load() >= 5 })
	written := len(listAll(t, victim, "batch"))
	cV.kill()
	ncV.Close()
	if written < 4 {
		t.Fatalf("the victim wrote %d memories before dying; the test needs unacknowledged writes", written)
	}

	survivor := newReplica(t, st, cfg, mc)
	_, jsS := connect()
	cS, err := StartConsumer(ctxT(t), survivor, jsS, names, testKeyring(t), testLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer cS.Stop(5 * time.Second)
	testenv.WaitFor(t, 60*time.Second, "every turn recorded", func() bool {
		for _, tf := range turns {
			rec, busy, tok, err := st.state.ClaimTurn(context.Background(), "batch", tf.GetTurnId(), time.Millisecond)
			if err != nil || busy || rec == nil {
				if tok != "" {
					_ = st.state.ReleaseTurn(context.Background(), "batch", tf.GetTurnId(), tok)
				}
				return false
			}
		}
		return true
	})
	mems := listAll(t, survivor, "batch")
	byTurn := map[string]int{}
	contents := map[string]int{}
	for _, m := range mems {
		byTurn[m.GetTurnId()]++
		contents[m.GetContent()]++
	}
	if len(mems) != n || len(byTurn) != n {
		t.Errorf("%d memories over %d turns, want %d and %d", len(mems), len(byTurn), n, n)
	}
	for c, k := range contents {
		if k != 1 {
			t.Errorf("%q stored %d times", c, k)
		}
	}
	t.Logf("victim wrote %d memories before it was killed; model calls %d for %d turns", written, calls.Load(), n)
}

// A model reply that is never JSON is retried (within a delivery and by redelivery) and then
// dead-lettered; an event that cannot be decoded is dead-lettered at once.
func TestConsumerDeadLetters(t *testing.T) {
	names, connect := testNATS(t)
	var calls atomic.Int64
	mc, _ := scriptedModel(t, func(req scripted.Request) scripted.Reply {
		calls.Add(1)
		return scripted.Text("Sure! Here are the memories: none, really.")
	})
	cfg := consumerConfig()
	cfg.ConsumerMaxDeliver = 2
	svc := newReplica(t, sharedStores(t, 0), cfg, mc)
	nc, js := connect()

	var mu sync.Mutex
	var dead []*nats.Msg
	sub, err := nc.Subscribe(names.DeadLetterFilter(), func(m *nats.Msg) {
		mu.Lock()
		dead = append(dead, m)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	c, err := StartConsumer(ctxT(t), svc, js, names, testKeyring(t), testLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(5 * time.Second)
	tf := turn("poison", "s", userSays("我喜欢爬山"))
	if err := events.PublishTurnFinished(ctxT(t), js, names, tf, events.SignWith(testKeyring(t))); err != nil {
		t.Fatal(err)
	}
	garbage := &nats.Msg{Subject: names.TurnFinishedSubject("poison"), Data: []byte("{not json")}
	testKeyring(t).Sign(garbage, time.Now())
	if _, err := js.PublishMsg(ctxT(t), garbage); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "two dead letters", func() bool { mu.Lock(); defer mu.Unlock(); return len(dead) == 2 })
	mu.Lock()
	defer mu.Unlock()
	var sawModel, sawDecode bool
	for _, m := range dead {
		if m.Subject != names.DeadLetterSubject(names.TurnFinishedSubject("poison")) {
			t.Errorf("dead letter on %s", m.Subject)
		}
		switch e := m.Header.Get(HeaderError); {
		case strings.Contains(e, "unusable after 2 attempts"):
			sawModel = true
			if m.Header.Get(HeaderDelivered) != "2" {
				t.Errorf("model failure dead-lettered after %s deliveries, want 2", m.Header.Get(HeaderDelivered))
			}
			got, err := events.UnmarshalTurnFinished(m.Data)
			if err != nil || got.GetTurnId() != tf.GetTurnId() {
				t.Errorf("dead letter payload: %v %v", got, err)
			}
		case strings.Contains(e, "undecodable"):
			sawDecode = true
			if m.Header.Get(HeaderDelivered) != "1" {
				t.Errorf("undecodable event dead-lettered after %s deliveries, want 1", m.Header.Get(HeaderDelivered))
			}
		default:
			t.Errorf("dead letter error %q", e)
		}
	}
	if !sawModel || !sawDecode {
		t.Errorf("dead letters: model %v, decode %v", sawModel, sawDecode)
	}
	if n := calls.Load(); n != 4 {
		t.Errorf("%d model calls, want 2 deliveries x 2 attempts", n)
	}
	waitExtractor(t, js, names, "nothing pending", func(info *jetstream.ConsumerInfo) bool {
		return info.NumAckPending == 0 && info.NumPending == 0
	})
	if mems := listAll(t, svc, "poison"); len(mems) != 0 {
		t.Errorf("memories of a poison turn: %v", mems)
	}
}

// waitExtractor waits until the extractor's durable consumer is as ok wants it, and returns
// what it last read of it.
func waitExtractor(t *testing.T, js jetstream.JetStream, names events.Names, what string, ok func(*jetstream.ConsumerInfo) bool) *jetstream.ConsumerInfo {
	t.Helper()
	cons, err := js.Consumer(ctxT(t), names.Stream, names.ExtractorConsumer)
	if err != nil {
		t.Fatal(err)
	}
	var info *jetstream.ConsumerInfo
	testenv.WaitFor(t, 20*time.Second, what, func() bool {
		info, err = cons.Info(ctxT(t))
		return err == nil && ok(info)
	})
	return info
}

// An extraction that outlasts the ack wait keeps its delivery: the in-progress acks restart the
// ack wait, so JetStream does not hand the event to another worker meanwhile.
func TestConsumerKeepsSlowExtractionAlive(t *testing.T) {
	names, connect := testNATS(t)
	var calls atomic.Int64
	mc, _ := scriptedModel(t, oneMemoryPerTurn(&calls))
	cfg := consumerConfig()
	cfg.ExtractTimeout = 10 * time.Second
	st := sharedStores(t, 0)
	svc := newReplica(t, st, cfg, mc)
	var slowed atomic.Int64
	svc.beforeFinish = func(ctx context.Context, _ string) {
		// The extraction takes 2.5 ack waits (the scenario, not synchronisation).
		slowed.Add(1)
		select {
		case <-ctx.Done():
		case <-time.After(5 * cfg.ConsumerAckWait / 2):
		}
	}
	_, js := connect()
	c, err := StartConsumer(ctxT(t), svc, js, names, testKeyring(t), testLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(5 * time.Second)
	publishTurns(t, js, names, "slow", 1)
	info := waitExtractor(t, js, names, "the event acknowledged", func(info *jetstream.ConsumerInfo) bool {
		return info.AckFloor.Stream == 1 && info.NumAckPending == 0
	})
	// The consumer sequence counts deliveries, redeliveries included.
	if info.Delivered.Consumer != 1 || slowed.Load() != 1 {
		t.Errorf("%d deliveries, extraction finished %d times; want 1 and 1", info.Delivered.Consumer, slowed.Load())
	}
	if got := len(listAll(t, svc, "slow")); got != 1 {
		t.Errorf("%d memories, want 1", got)
	}
}

// TestConsumerSettlesSkippedTurnsWithoutAWorker: while the only worker waits on an extraction,
// events that need none (the prefilter skips them, or the turn did not complete) are still
// acknowledged at once, in the consume goroutine; they used to wait for the worker.
func TestConsumerSettlesSkippedTurnsWithoutAWorker(t *testing.T) {
	names, connect := testNATS(t)
	var calls atomic.Int64
	mc, _ := scriptedModel(t, oneMemoryPerTurn(&calls))
	cfg := consumerConfig()
	cfg.ConsumerWorkers = 1
	cfg.ConsumerAckWait = 30 * time.Second
	cfg.ExtractTimeout = 10 * time.Second
	svc := newReplica(t, sharedStores(t, 0), cfg, mc)
	busy, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	svc.beforeFinish = func(ctx context.Context, _ string) {
		once.Do(func() { close(busy) })
		select {
		case <-ctx.Done():
		case <-release:
		}
	}
	_, js := connect()
	c, err := StartConsumer(ctxT(t), svc, js, names, testKeyring(t), testLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(5 * time.Second)
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	publishTurns(t, js, names, "settle", 1) // to extract: the worker holds it
	<-busy
	skipped := []*eventsv1.TurnFinished{
		turn("settle", "s", userSays("请帮我算一下 12*7+3。")),
		turn("settle", "s", userSays("Show me the menu")),
	}
	failed := turn("settle", "s", userSays("my name is Ada"))
	failed.Status = orchestratorv1.TurnStatus_TURN_STATUS_FAILED
	for _, tf := range append(skipped, failed) {
		if err := events.PublishTurnFinished(ctxT(t), js, names, tf, events.SignWith(testKeyring(t))); err != nil {
			t.Fatal(err)
		}
	}
	info := waitExtractor(t, js, names, "the three events that need no extraction acknowledged", func(info *jetstream.ConsumerInfo) bool {
		return info.Delivered.Stream == 4 && info.NumAckPending == 1
	})
	if info.AckFloor.Stream != 0 {
		t.Errorf("ack floor %d, want 0: the first event is still being extracted", info.AckFloor.Stream)
	}
	close(release)
	released = true
	waitExtractor(t, js, names, "every event acknowledged", func(info *jetstream.ConsumerInfo) bool {
		return info.AckFloor.Stream == 4 && info.NumAckPending == 0
	})
	if n := calls.Load(); n != 1 {
		t.Errorf("%d extraction calls, want 1", n)
	}
}

// The in-progress acks come every period and none once stop has returned.
func TestKeepAliveStops(t *testing.T) {
	m := &countingMsg{}
	p := keepAlive(m, 5*time.Millisecond)
	testenv.WaitFor(t, 10*time.Second, "three in-progress acks", func() bool { return m.n.Load() >= 3 })
	p.stop()
	n := m.n.Load()
	// Ten periods for a timer that stop failed to end to fire (observation, not synchronisation).
	time.Sleep(50 * time.Millisecond)
	if got := m.n.Load(); got != n {
		t.Errorf("%d in-progress acks after stop", got-n)
	}
}

// countingMsg counts InProgress; the rest of jetstream.Msg is not used.
type countingMsg struct {
	jetstream.Msg
	n atomic.Int64
}

func (m *countingMsg) InProgress() error { m.n.Add(1); return nil }

// TestStartConsumerLeavesSettledConsumerAlone starts the extractor over a consumer that exists:
// one with the extractor's settings and another description is not updated (the description
// stays), and one whose ack wait differs is put back to the extractor's.
func TestStartConsumerLeavesSettledConsumerAlone(t *testing.T) {
	names, connect := testNATS(t)
	mc, _ := scriptedModel(t, func(scripted.Request) scripted.Reply { return scripted.Text(`{"memories":[]}`) })
	cfg := consumerConfig()
	svc := newReplica(t, sharedStores(t, 0), cfg, mc)
	_, js := connect()
	start := func() jetstream.ConsumerConfig {
		t.Helper()
		c, err := StartConsumer(ctxT(t), svc, js, names, testKeyring(t), testLogger())
		if err != nil {
			t.Fatal(err)
		}
		c.Stop(5 * time.Second)
		cons, err := js.Consumer(ctxT(t), names.Stream, names.ExtractorConsumer)
		if err != nil {
			t.Fatal(err)
		}
		return cons.CachedInfo().Config
	}
	update := func(edit func(*jetstream.ConsumerConfig)) {
		t.Helper()
		c := start()
		edit(&c)
		if _, err := js.UpdateConsumer(ctxT(t), names.Stream, c); err != nil {
			t.Fatal(err)
		}
	}

	update(func(c *jetstream.ConsumerConfig) { c.Description = "tuned by an operator" })
	if got := start().Description; got != "tuned by an operator" {
		t.Errorf("a settled consumer was updated: description %q", got)
	}
	update(func(c *jetstream.ConsumerConfig) { c.AckWait = time.Hour })
	if got := start().AckWait; got != cfg.ConsumerAckWait {
		t.Errorf("ack wait %v after start, want the extractor's %v", got, cfg.ConsumerAckWait)
	}
}
