package testenv

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/hermes-agent/hermes/internal/rpc"
)

func TestRedisDeletesPrefixAtEnd(t *testing.T) {
	ctx := context.Background()
	var prefix string
	t.Run("uses", func(t *testing.T) {
		var rdb *redis.Client
		rdb, prefix = Redis(t)
		if !strings.HasPrefix(prefix, "hermes-test:") || !strings.HasSuffix(prefix, ":") {
			t.Errorf("prefix = %q", prefix)
		}
		for _, k := range []string{"a", "b:c"} {
			if err := rdb.Set(ctx, prefix+k, "v", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		}
	})
	rdb, _ := Redis(t)
	keys, err := rdb.Keys(ctx, prefix+"*").Result()
	if err != nil || len(keys) != 0 {
		t.Errorf("keys left under %s: %v, %v", prefix, keys, err)
	}
}

func TestServe(t *testing.T) {
	srv := rpc.NewServer(rpc.ServerOptions{ShutdownTimeout: time.Second})
	conn := Serve(t, srv)
	resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v", resp, err)
	}
}

// Without HERMES_TEST_REDIS_URL the tests write into a database of their own, never database 0.
func TestRedisDefaultsToItsOwnDatabase(t *testing.T) {
	t.Setenv("HERMES_TEST_REDIS_URL", "")
	opts, err := redis.ParseURL(RedisURL())
	if err != nil {
		t.Fatal(err)
	}
	if opts.DB == 0 {
		t.Errorf("tests use Redis database 0 by default (%s)", RedisURL())
	}
	rdb, _ := Redis(t)
	if db := rdb.Options().DB; db != opts.DB {
		t.Errorf("Redis(t) uses database %d, want %d", db, opts.DB)
	}
}
