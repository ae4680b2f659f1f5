package memory

import (
	"bytes"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hermes-agent/hermes/internal/events"
	"github.com/hermes-agent/hermes/internal/testenv"
)

// Forged turn.finished events — published by anyone who can reach NATS — write no memory: the
// extractor dead-letters every event without a valid proof of origin or whose subject is not its
// user's, and still extracts the genuine one published after them.
func TestConsumerRefusesForgedEvents(t *testing.T) {
	names, connect := testNATS(t)
	var calls atomic.Int64
	mc, _ := scriptedModel(t, oneMemoryPerTurn(&calls))
	svc := newReplica(t, sharedStores(t, 0), consumerConfig(), mc)
	nc, js := connect()
	keys := testKeyring(t)
	otherKeys, err := events.ParseKeyring("some-other-installation-key-0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	dead := map[string]string{} // turn id → Hermes-Error
	sub, err := nc.Subscribe(names.DeadLetterFilter(), func(m *nats.Msg) {
		ev, err := events.UnmarshalTurnFinished(m.Data)
		if err != nil {
			t.Errorf("dead letter payload: %v (%s, %q)", err, m.Header.Get(HeaderError), m.Data)
			return
		}
		mu.Lock()
		dead[ev.GetTurnId()] = m.Header.Get(HeaderError)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	c, err := StartConsumer(ctxT(t), svc, js, names, keys, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(5 * time.Second)

	const victim = "victim"
	message := func(subjectUser, payloadUser, marker string) *nats.Msg {
		tf := turn(payloadUser, "s", userSays("记住我的爱好编号"+marker+"号是集邮"))
		data, err := events.MarshalTurnFinished(tf)
		if err != nil {
			t.Fatal(err)
		}
		return &nats.Msg{Subject: names.TurnFinishedSubject(subjectUser), Data: data, Header: nats.Header{}}
	}
	forgeries := []struct {
		name    string
		msg     func() *nats.Msg
		wantErr string
	}{
		{"unsigned", func() *nats.Msg { return message(victim, victim, "901") }, "no Hermes-Signature"},
		{"another key", func() *nats.Msg {
			m := message(victim, victim, "902")
			otherKeys.Sign(m, time.Now())
			return m
		}, "does not match"},
		{"altered payload", func() *nats.Msg {
			m := message(victim, victim, "903")
			keys.Sign(m, time.Now())
			m.Data = bytes.Replace(m.Data, []byte("903"), []byte("913"), 1)
			return m
		}, "does not match"},
		{"replayed to another subject", func() *nats.Msg {
			// Signed for the publisher's own subject, moved to the victim's: the payload names
			// the victim, so only the signature's subject binding catches it.
			m := message("mallory", victim, "904")
			keys.Sign(m, time.Now())
			m.Subject = names.TurnFinishedSubject(victim)
			return m
		}, "does not match"},
		{"subject of another user", func() *nats.Msg {
			// A correctly signed event whose subject is not the payload's user.
			m := message("mallory", victim, "905")
			keys.Sign(m, time.Now())
			return m
		}, "does not belong to the event's user"},
		{"dated in the future", func() *nats.Msg {
			m := message(victim, victim, "906")
			keys.Sign(m, time.Now().Add(time.Hour))
			return m
		}, "outside the accepted window"},
		{"malformed signature", func() *nats.Msg {
			m := message(victim, victim, "907")
			keys.Sign(m, time.Now())
			m.Header.Set(events.HeaderSignature, "hmac-sha256=!!!")
			return m
		}, "malformed"},
	}
	want := map[string]string{} // turn id → expected error
	for _, f := range forgeries {
		m := f.msg()
		ev, err := events.UnmarshalTurnFinished(m.Data)
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		want[ev.GetTurnId()] = f.name + ": " + f.wantErr
		if _, err := js.PublishMsg(ctxT(t), m); err != nil {
			t.Fatal(err)
		}
	}
	genuine := turn(victim, "s", userSays("记住我的爱好编号011号是集邮"))
	if err := events.PublishTurnFinished(ctxT(t), js, names, genuine, events.SignWith(keys)); err != nil {
		t.Fatal(err)
	}

	testenv.WaitFor(t, 30*time.Second, "the forgeries dead-lettered and the genuine event extracted", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(dead) == len(forgeries) && len(listAll(t, svc, victim)) == 1
	})
	mu.Lock()
	for id, w := range want {
		name, substr, _ := strings.Cut(w, ": ")
		if got := dead[id]; !strings.Contains(got, "not authentic") || !strings.Contains(got, substr) {
			t.Errorf("%s: dead-lettered with %q, want %q", name, got, substr)
		}
	}
	mu.Unlock()
	mems := listAll(t, svc, victim)
	if len(mems) != 1 || mems[0].GetTurnId() != genuine.GetTurnId() {
		t.Errorf("victim's memories: %v, want only the genuine turn's", mems)
	}
	if n := len(listAll(t, svc, "mallory")); n != 0 {
		t.Errorf("mallory has %d memories", n)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the extraction model ran %d times, want once (forgeries never reach it)", n)
	}
}
