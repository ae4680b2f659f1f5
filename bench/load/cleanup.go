package main

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hermes-agent/hermes/internal/events"
)

// cleanupBackends removes what a microservices run left in the shared Redis (keys under its
// prefix) and NATS (its namespaced stream).
func cleanupBackends(c config, prefix, namespace string) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if opts, err := redis.ParseURL(c.redisURL); err == nil {
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
	if nc, js, err := events.Connect(c.natsURL, "hermes-load-cleanup", nil); err == nil {
		_ = js.DeleteStream(ctx, events.NamespacedNames(namespace).Stream)
		nc.Close()
	}
}
