package main

import "github.com/hermes-agent/hermes/test/multiprocess/cluster"

// cleanupBackends removes what a microservices run left in the shared Redis (keys under its
// prefix) and NATS (its namespaced stream).
func cleanupBackends(c config, prefix, namespace string) {
	cluster.RemoveBackendData(c.redisURL, prefix, c.natsURL, namespace)
}
