package cluster

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hermes-agent/hermes/internal/events"
)

// RemoveBackendData removes what a cluster started with a RedisPrefix and NATSNamespace left in
// a shared Redis (the keys under the prefix) and NATS (the namespace's stream), so runs against
// the machine's shared servers leave nothing behind. Errors are ignored: it is best effort at
// the end of a run.
func RemoveBackendData(redisURL, prefix, natsURL, namespace string) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if opts, err := redis.ParseURL(redisURL); err == nil && prefix != "" {
		rdb := redis.NewClient(opts)
		iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		for i := 0; i < len(keys); i += 500 {
			_ = rdb.Del(ctx, keys[i:min(i+500, len(keys))]...).Err()
		}
		_ = rdb.Close()
	}
	if nc, js, err := events.Connect(natsURL, "hermes-cluster-cleanup", nil); err == nil && namespace != "" {
		_ = js.DeleteStream(ctx, events.NamespacedNames(namespace).Stream)
		nc.Close()
	}
}
