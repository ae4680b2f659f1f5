package app

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hermes-agent/hermes/internal/events"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	"github.com/hermes-agent/hermes/internal/qdranttest"
	"github.com/hermes-agent/hermes/internal/testenv"
	eventsv1 "github.com/hermes-agent/hermes/proto/hermes/events/v1"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// startMemory runs the memory target with the given flags and returns a client of it.
func startMemory(t *testing.T, args ...string) (memoryv1.MemoryServiceClient, *App) {
	t.Helper()
	var cfg Config
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(append([]string{"--target=memory", "--listen=127.0.0.1:0", "--data-dir=" + t.TempDir()}, args...)); err != nil {
		t.Fatal(err)
	}
	a, err := New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	a.Start()
	t.Cleanup(func() { _ = a.Stop() })
	conn, err := a.Conn(TargetMemory)
	if err != nil {
		t.Fatal(err)
	}
	return memoryv1.NewMemoryServiceClient(conn), a
}

func TestMemoryTargetWiring(t *testing.T) {
	model, err := scripted.New(func(req scripted.Request) scripted.Reply {
		if strings.Contains(req.LastUser(), "蜀香园") {
			return scripted.Text(`{"memories":[{"type":"preference","content":"用户最常去的川菜馆是蜀香园","confidence":0.95,"subject":"restaurant","attributes":{"restaurant_name":"蜀香园"}}]}`)
		}
		return scripted.Text(`{"memories":[]}`)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	ns := "appmem" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "")
	_, prefix := testenv.Redis(t)
	modes := map[string][]string{
		// Embedded stores, the real NATS (a namespace of its own).
		"embedded": {"--nats-url=nats://127.0.0.1:4222", "--nats-namespace=" + ns + "e", "--events-key=" + testEventsKey},
		// Redis + Qdrant (the test double unless HERMES_TEST_QDRANT_ADDR is set).
		"redis+qdrant": {"--nats-url=nats://127.0.0.1:4222", "--nats-namespace=" + ns + "r", "--events-key=" + testEventsKey, "--redis-url=" + testenv.RedisURL(),
			"--redis-prefix=" + prefix, "--qdrant-addr=" + qdranttest.Addr(t), "--memory.qdrant-collection=" + ns},
	}
	for name, args := range modes {
		t.Run(name, func(t *testing.T) {
			c, a := startMemory(t, append(args, "--model-base-url="+model.URL())...)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := c.Remember(ctx, &memoryv1.RememberRequest{UserId: "alice", Type: memoryv1.MemoryType_MEMORY_TYPE_FACT, Content: "User is allergic to peanuts"}); err != nil {
				t.Fatal(err)
			}
			rr, err := c.Recall(ctx, &memoryv1.RecallRequest{UserId: "alice", Query: "peanuts"})
			if err != nil || len(rr.GetMemories()) != 1 {
				t.Fatalf("recall: %v %v", rr, err)
			}
			_, js, err := a.NATS(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = js.DeleteStream(context.Background(), a.EventNames().Stream) }()
			ev := &eventsv1.TurnFinished{TurnId: "t1", UserId: "li", SessionId: "s1", Messages: []*eventsv1.TurnMessage{
				{Message: &sessionv1.Message{Id: "m1", Role: sessionv1.Role_ROLE_USER, Content: "我最常去的川菜馆是蜀香园"}}}}
			keys, err := a.EventKeys()
			if err != nil {
				t.Fatal(err)
			}
			if err := events.PublishTurnFinished(ctx, js, a.EventNames(), ev, events.SignWith(keys)); err != nil {
				t.Fatal(err)
			}
			var lr *memoryv1.ListMemoriesResponse
			if !testenv.Poll(20*time.Second, func() bool {
				lr, err = c.ListMemories(ctx, &memoryv1.ListMemoriesRequest{UserId: "li"})
				if err != nil {
					t.Fatal(err)
				}
				return len(lr.GetMemories()) == 1 && lr.GetMemories()[0].GetAttributes()["restaurant_name"] == "蜀香园"
			}) {
				t.Fatalf("the published turn was not extracted: %v", lr)
			}
			for _, u := range []string{"alice", "li"} {
				if _, err := c.ForgetUser(ctx, &memoryv1.ForgetUserRequest{UserId: u}); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
