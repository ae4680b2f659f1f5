package mcpgateway

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/hermes-agent/hermes/internal/errclass"
	"github.com/hermes-agent/hermes/internal/testenv"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

func testRedisStore(t *testing.T) *RedisServerStore {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	return NewRedisServerStore(rdb, prefix+"mcpgateway:")
}

// TestServerStoreConformance runs the same checks against both stores.
func TestServerStoreConformance(t *testing.T) {
	stores := map[string]func(t *testing.T) ServerStore{
		"redis": func(t *testing.T) ServerStore { return testRedisStore(t) },
		"bolt": func(t *testing.T) ServerStore {
			s, err := OpenBoltServerStore(filepath.Join(t.TempDir(), "gw.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			ctx := context.Background()
			spec := httpSpec("a", "a", "http://127.0.0.1:1/mcp")
			if err := s.CreateServer(ctx, spec); err != nil {
				t.Fatal(err)
			}
			if err := s.CreateServer(ctx, spec); !errors.Is(err, errclass.Exists) {
				t.Errorf("second create: %v, want errclass.Exists", err)
			}
			list, err := s.ListServers(ctx)
			if err != nil || len(list) != 1 || list[0].GetHttp().GetUrl() != "http://127.0.0.1:1/mcp" {
				t.Fatalf("list = %v, %v", list, err)
			}
			if err := s.DeleteServer(ctx, "a"); err != nil {
				t.Fatal(err)
			}
			if err := s.DeleteServer(ctx, "a"); !errors.Is(err, errclass.NotFound) {
				t.Errorf("second delete: %v, want errclass.NotFound", err)
			}
			if list, _ := s.ListServers(ctx); len(list) != 0 {
				t.Errorf("after delete: %v", list)
			}
		})
	}
}

// TestReplicasShareServers: a server added through one gateway replica is connected by the
// other within a sync interval, so a tool call may land on either; removing it through one
// removes it from both.
func TestReplicasShareServers(t *testing.T) {
	url := newProbeServer(t).url
	store := testRedisStore(t)
	cfg := testConfig()
	cfg.SyncInterval = 50 * time.Millisecond
	a, ga := startGateway(t, cfg, Options{Store: store})
	b, gb := startGateway(t, cfg, Options{Store: store})
	if err := ga.Start(); err != nil {
		t.Fatal(err)
	}
	if err := gb.Start(); err != nil {
		t.Fatal(err)
	}
	addReady(t, a, httpSpec("probe", "pr", url))
	testenv.WaitFor(t, 10*time.Second, "replica b connects to the stored server", func() bool {
		s := serverStateOrNil(b, "probe")
		return s != nil && s.GetState() == pb.ServerState_SERVER_STATE_READY
	})
	if _, err := b.AddServer(context.Background(), &pb.AddServerRequest{Spec: httpSpec("probe", "pr", url)}); err == nil {
		t.Error("adding the same name through the other replica succeeded")
	}
	if _, err := b.RemoveServer(context.Background(), &pb.RemoveServerRequest{Name: "probe"}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "replica a drops the removed server", func() bool { return serverStateOrNil(a, "probe") == nil })
}

// TestAddedServersSurviveRestart: with the embedded store, a server added at run time is
// connected again after the gateway restarts.
func TestAddedServersSurviveRestart(t *testing.T) {
	url := newProbeServer(t).url
	path := filepath.Join(t.TempDir(), "gw.db")
	store, err := OpenBoltServerStore(path)
	if err != nil {
		t.Fatal(err)
	}
	c, g := startGateway(t, testConfig(), Options{Store: store})
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	addReady(t, c, httpSpec("probe", "pr", url))
	g.Close()
	_ = store.Close()

	store2, err := OpenBoltServerStore(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store2.Close() })
	c2, g2 := startGateway(t, testConfig(), Options{Store: store2})
	if err := g2.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the stored server reconnects after the restart", func() bool {
		s := serverStateOrNil(c2, "probe")
		return s != nil && s.GetState() == pb.ServerState_SERVER_STATE_READY
	})
}

func serverStateOrNil(c pb.MCPGatewayServiceClient, name string) *pb.Server {
	res, err := c.ListServers(context.Background(), &pb.ListServersRequest{})
	if err != nil {
		return nil
	}
	for _, s := range res.GetServers() {
		if s.GetSpec().GetName() == name {
			return s
		}
	}
	return nil
}
