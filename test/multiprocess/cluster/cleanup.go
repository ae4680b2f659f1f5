package cluster

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hermes-agent/hermes/internal/events"
	"github.com/hermes-agent/hermes/internal/testenv"
)

// RemoveBackendData removes what a cluster started with a RedisPrefix and NATSNamespace left in
// a shared Redis (the keys under the prefix) and NATS (the namespace's stream), so runs against
// the machine's shared servers leave nothing behind. Errors are ignored: it is best effort at
// the end of a run.
func RemoveBackendData(redisURL, prefix, natsURL, namespace string) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if prefix == "" || namespace == "" {
		return // nothing of the run's own to remove: never delete every key or the default stream
	}
	if opts, err := redis.ParseURL(redisURL); err == nil {
		rdb := redis.NewClient(opts)
		testenv.DeleteKeys(ctx, rdb, prefix)
		_ = rdb.Close()
	}
	if nc, js, err := events.Connect(natsURL, "hermes-cluster-cleanup", nil); err == nil {
		_ = js.DeleteStream(ctx, events.NamespacedNames(namespace).Stream)
		nc.Close()
	}
}
