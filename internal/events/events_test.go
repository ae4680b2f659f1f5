package events

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/testing/protocmp"

	eventsv1 "github.com/hermes-agent/hermes/proto/hermes/events/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

func TestUserToken(t *testing.T) {
	for in, want := range map[string]string{
		"alice":     "alice",
		"user-42_x": "user-42_x",
		"a.b":       "b64_YS5i",
		"*":         "b64_Kg",
		"b64_x":     "b64_YjY0X3g",
		"张三":        "b64_5byg5LiJ",
	} {
		if got := userToken(in); got != want {
			t.Errorf("userToken(%q) = %q, want %q", in, got, want)
		}
	}
	if got := DefaultNames().TurnFinishedSubject("alice"); got != "hermes.turn.finished.alice" {
		t.Errorf("subject = %q", got)
	}
}

// testStream connects to the NATS server at url and makes a stream of random names, deleted
// with the connection when the test ends; ctx ends then too (at most 10 s).
func testStream(t *testing.T, url string) (context.Context, jetstream.JetStream, Names, jetstream.Stream) {
	t.Helper()
	nc, js, err := Connect(url, "events-test", nil)
	if err != nil {
		t.Fatalf("NATS: %v (start nats-server -js)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	names := randomNames(t)
	t.Cleanup(func() {
		cancel()
		_ = js.DeleteStream(context.Background(), names.Stream)
		nc.Close()
	})
	st, err := EnsureStream(ctx, js, names)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, js, names, st
}

func randomNames(t *testing.T) Names {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return NamespacedNames("t" + hex.EncodeToString(b))
}

// TestPublishDeduplicates publishes one turn twice on the real NATS server: the stream stores it
// once, so a retried publish never produces a second extraction.
func TestPublishDeduplicates(t *testing.T) {
	for name, url := range map[string]func(t *testing.T) string{
		"server": func(*testing.T) string { return "nats://127.0.0.1:4222" },
		"embedded": func(t *testing.T) string {
			e, err := StartEmbedded(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(e.Close)
			return e.URL()
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, js, names, st := testStream(t, url(t))
			ev := &eventsv1.TurnFinished{TurnId: "turn-1", SessionId: "s", UserId: "a.b", Messages: []*eventsv1.TurnMessage{{Message: &sessionv1.Message{Content: "hi"}}}}
			for range 2 {
				if err := PublishTurnFinished(ctx, js, names, ev); err != nil {
					t.Fatal(err)
				}
			}
			info, err := st.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.State.Msgs != 1 {
				t.Errorf("stream holds %d messages, want 1", info.State.Msgs)
			}
			msg, err := st.GetLastMsgForSubject(ctx, names.TurnFinishedSubject("a.b"))
			if err != nil {
				t.Fatal(err)
			}
			got, err := UnmarshalTurnFinished(msg.Data)
			if err != nil || got.GetTurnId() != "turn-1" || got.GetMessages()[0].GetMessage().GetContent() != "hi" {
				t.Errorf("decoded %v, %v", got, err)
			}
			var _ jetstream.Stream = st
		})
	}
}

func TestUnmarshalRejectsIncomplete(t *testing.T) {
	for _, data := range []string{``, `{`, `{"turnId":"x"}`, `{"userId":"u"}`, `[]`} {
		if _, err := UnmarshalTurnFinished([]byte(data)); err == nil {
			t.Errorf("UnmarshalTurnFinished(%q) succeeded", data)
		}
	}
	if _, err := UnmarshalTurnFinished([]byte(`{"turnId":"x","userId":"u","futureField":1}`)); err != nil {
		t.Errorf("unknown fields must be tolerated: %v", err)
	}
}

// TestEmbeddedNeedsItsToken: the embedded server refuses a local client without the token
// generated at start (another local user would read every user's turn events), and its address
// for logs carries no token.
func TestEmbeddedNeedsItsToken(t *testing.T) {
	emb, err := StartEmbedded(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	if nc, err := nats.Connect("nats://"+emb.Addr(), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("a client without the token connected")
	}
	if strings.Contains(emb.Addr(), "@") {
		t.Errorf("Addr %q carries credentials", emb.Addr())
	}
	nc, _, err := Connect(emb.URL(), "test", nil)
	if err != nil {
		t.Fatalf("with the token: %v", err)
	}
	nc.Close()
	if got := redactURL("nats://s3cret@127.0.0.1:4222"); strings.Contains(got, "s3cret") {
		t.Errorf("redactURL kept the token: %s", got)
	}
}

// TestEmbeddedInProcess: the process's own client reaches the embedded server without a socket,
// and JetStream works over it. (The connection still authenticates; a wrong token is refused
// after the client's 10 s wait, too slow for this suite: TestEmbeddedNeedsItsToken covers tokens.)
func TestEmbeddedInProcess(t *testing.T) {
	emb, err := StartEmbedded(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	nc, js, err := Connect(emb.URL(), "test", nil, emb.InProcess())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if addr := nc.ConnectedAddr(); addr != "pipe" {
		t.Errorf("connected to %q, want the in-process pipe", addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := EnsureStreamReplicas(ctx, js, DefaultNames(), 1); err != nil {
		t.Fatal(err)
	}
}

// TestTurnFinishedEncodings: events are published as binary protobuf; the protobuf JSON of
// earlier releases, still in a stream after an upgrade, decodes to the same event.
func TestTurnFinishedEncodings(t *testing.T) {
	ev := &eventsv1.TurnFinished{TurnId: "t1", UserId: "u1", SessionId: "s1", Messages: []*eventsv1.TurnMessage{{Message: &sessionv1.Message{Seq: 3, Role: sessionv1.Role_ROLE_USER, Content: "我住在柏林"}}}}
	bin, err := MarshalTurnFinished(ev)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.HasPrefix(bin, []byte("{")) {
		t.Fatalf("published JSON, want binary protobuf: %q", bin)
	}
	legacy, err := protojson.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"binary": bin, "JSON of earlier releases": legacy, "JSON with spaces": append([]byte(" \n"), legacy...)} {
		got, err := UnmarshalTurnFinished(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if diff := cmp.Diff(ev, got, protocmp.Transform()); diff != "" {
			t.Errorf("%s: decoded event differs (-want +got):\n%s", name, diff)
		}
	}
	// A field a newer publisher adds (number 999, a string) is skipped.
	future := protowire.AppendString(protowire.AppendTag(bytes.Clone(bin), 999, protowire.BytesType), "later")
	if _, err := UnmarshalTurnFinished(future); err != nil {
		t.Errorf("an unknown binary field must be tolerated: %v", err)
	}
	// Binary without the ids is refused, as JSON is.
	noUser, _ := MarshalTurnFinished(&eventsv1.TurnFinished{TurnId: "t1"})
	if _, err := UnmarshalTurnFinished(noUser); err == nil {
		t.Error("an event without user_id was accepted")
	}
}

// FuzzUnmarshalTurnFinished: whatever a stream holds, decoding never panics, and an accepted
// event has the ids the extractor relies on.
func FuzzUnmarshalTurnFinished(f *testing.F) {
	bin, _ := MarshalTurnFinished(&eventsv1.TurnFinished{TurnId: "t", UserId: "u", Messages: []*eventsv1.TurnMessage{{Message: &sessionv1.Message{Content: "x"}}}})
	f.Add(bin)
	f.Add([]byte(`{"turnId":"t","userId":"u"}`))
	f.Add([]byte{0x0a, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		ev, err := UnmarshalTurnFinished(data)
		if err == nil && (ev.GetTurnId() == "" || ev.GetUserId() == "") {
			t.Fatalf("accepted an event without ids: %v", ev)
		}
	})
}

// TestPublishRetrySpreadAndCap: after a NATS outage the replicas' outboxes do not retry in
// lockstep (the pauses are spread) and never wait longer than 2 s.
func TestPublishRetrySpreadAndCap(t *testing.T) {
	for _, attempt := range []int{0, 2, 40} {
		seen := map[time.Duration]bool{}
		for range 200 {
			d := publishRetry.Delay(attempt)
			if d > 2*time.Second || d < 40*time.Millisecond {
				t.Fatalf("Delay(%d) = %s, want within [40ms, 2s]", attempt, d)
			}
			seen[d] = true
		}
		if len(seen) < 20 {
			t.Errorf("Delay(%d) takes %d values in 200 draws; want it spread", attempt, len(seen))
		}
	}
}

// TestPublishEncoded: an event published with the encoding made before (the outbox entry's)
// carries those very bytes, signed over them, and decodes to the event.
func TestPublishEncoded(t *testing.T) {
	ctx, js, names, st := testStream(t, "nats://127.0.0.1:4222")
	keys, err := ParseKeyring("events-test-key-0123456789abcdef0123456789")
	if err != nil {
		t.Fatal(err)
	}
	ev := &eventsv1.TurnFinished{TurnId: "turn-enc", SessionId: "s", UserId: "u", Messages: []*eventsv1.TurnMessage{{Message: &sessionv1.Message{Content: "hi"}}}}
	data, err := MarshalTurnFinished(ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := PublishTurnFinished(ctx, js, names, ev, SignWith(keys), Encoded(data)); err != nil {
		t.Fatal(err)
	}
	msg, err := st.GetLastMsgForSubject(ctx, names.TurnFinishedSubject("u"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(msg.Data, data) {
		t.Errorf("published %x, want the given encoding %x", msg.Data, data)
	}
	if err := keys.Verify(msg.Subject, msg.Header, msg.Data, time.Now()); err != nil {
		t.Errorf("signature: %v", err)
	}
	got, err := UnmarshalTurnFinished(msg.Data)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ev, got, protocmp.Transform()); diff != "" {
		t.Errorf("decoded event (-want +got):\n%s", diff)
	}
}

// TestRetryStartup: a server error status (500 and up) is tried again until the call succeeds;
// any other error, and the last error once ctx ends, is returned.
func TestRetryStartup(t *testing.T) {
	busy := &jetstream.APIError{Code: 500, ErrorCode: 10012, Description: "invalid stream"}
	refused := &jetstream.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use"}
	other := errors.New("no responders")
	for _, tc := range []struct {
		name      string
		errs      []error // what the calls return, in turn; nil after the last
		wantCalls int
		wantErr   error
	}{
		{"succeeds", nil, 1, nil},
		{"server busy twice", []error{busy, fmt.Errorf("wrapped: %w", busy)}, 3, nil},
		{"client error at once", []error{refused, nil}, 1, refused},
		{"other error at once", []error{other}, 1, other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := RetryStartup(context.Background(), func() error {
				calls++
				if calls <= len(tc.errs) {
					return tc.errs[calls-1]
				}
				return nil
			})
			if calls != tc.wantCalls || !errors.Is(err, tc.wantErr) {
				t.Errorf("%d calls, error %v; want %d, %v", calls, err, tc.wantCalls, tc.wantErr)
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := RetryStartup(ctx, func() error { return busy }); !errors.Is(err, busy) {
		t.Errorf("with ctx ended: %v, want the last error", err)
	}
}

// TestEnsureStreamLeavesSettledStreamAlone runs EnsureStream over an existing stream: one with
// Hermes' settings and a byte limit an operator added is not updated (the limit survives, so no
// update reached the server), and one whose age limit differs is put back to Hermes' values.
func TestEnsureStreamLeavesSettledStreamAlone(t *testing.T) {
	ctx, js, names, st := testStream(t, "nats://127.0.0.1:4222")
	cfg := st.CachedInfo().Config
	cfg.MaxBytes = 1 << 30
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	st, err := EnsureStream(ctx, js, names)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config.MaxBytes; got != 1<<30 {
		t.Errorf("after EnsureStream over a settled stream MaxBytes = %d, want the operator's %d", got, 1<<30)
	}

	cfg.MaxAge = time.Hour
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if st, err = EnsureStream(ctx, js, names); err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.MaxAge != 7*24*time.Hour {
		t.Errorf("after EnsureStream over a changed stream MaxAge = %v, want 7 days", info.Config.MaxAge)
	}
}

func TestStreamSettled(t *testing.T) {
	want := streamConfig(DefaultNames(), 1)
	for _, tc := range []struct {
		name string
		edit func(*jetstream.StreamConfig)
		ok   bool
	}{
		{"same", func(*jetstream.StreamConfig) {}, true},
		{"subjects in another order", func(c *jetstream.StreamConfig) { c.Subjects = []string{c.Subjects[1], c.Subjects[0]} }, true},
		{"another description and a byte limit", func(c *jetstream.StreamConfig) { c.Description, c.MaxBytes = "ops", 1<<20 }, true},
		{"a subject missing", func(c *jetstream.StreamConfig) { c.Subjects = c.Subjects[:1] }, false},
		{"three copies", func(c *jetstream.StreamConfig) { c.Replicas = 3 }, false},
		{"memory storage", func(c *jetstream.StreamConfig) { c.Storage = jetstream.MemoryStorage }, false},
		{"work-queue retention", func(c *jetstream.StreamConfig) { c.Retention = jetstream.WorkQueuePolicy }, false},
		{"an hour's age", func(c *jetstream.StreamConfig) { c.MaxAge = time.Hour }, false},
		{"no de-duplication window", func(c *jetstream.StreamConfig) { c.Duplicates = 0 }, false},
	} {
		have := streamConfig(DefaultNames(), 1)
		have.Subjects = slices.Clone(have.Subjects)
		tc.edit(&have)
		if got := streamSettled(have, want); got != tc.ok {
			t.Errorf("%s: streamSettled = %v, want %v", tc.name, got, tc.ok)
		}
	}
}
