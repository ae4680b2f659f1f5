// Package testenv is test support: the shared backends CI starts (Redis) and in-memory gRPC
// serving, set up the same way for every package's tests. It is not _test.go code only so that
// several packages can share it; nothing but tests imports it.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/hermes-agent/hermes/internal/backoff"
	"github.com/hermes-agent/hermes/internal/rpc"
)

// defaultRedisURL is the tests' Redis when HERMES_TEST_REDIS_URL is unset: database 15, so a
// test run on a developer's machine never writes into database 0, where a local Hermes (or
// anything else) keeps its data.
const defaultRedisURL = "redis://127.0.0.1:6379/15"

// RedisURL is the Redis the tests use: HERMES_TEST_REDIS_URL, by default defaultRedisURL.
func RedisURL() string {
	if url := os.Getenv("HERMES_TEST_REDIS_URL"); url != "" {
		return url
	}
	return defaultRedisURL
}

// Redis connects to the test Redis (RedisURL) and returns it with a fresh random key prefix
// ("hermes-test:<hex>:"). When the test ends the prefix's keys are deleted and the client is
// closed. An unreachable Redis fails the test, never skips it: CI starts one.
func Redis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	opts, err := redis.ParseURL(RedisURL())
	if err != nil {
		t.Fatalf("HERMES_TEST_REDIS_URL: %v", err)
	}
	rdb := redis.NewClient(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		t.Fatalf("Redis at %s is required (CI starts it; locally scripts/ensure-backends.sh, or set HERMES_TEST_REDIS_URL): %v", opts.Addr, err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "hermes-test:" + hex.EncodeToString(b) + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		DeleteKeys(ctx, rdb, prefix)
		_ = rdb.Close()
	})
	return rdb, prefix
}

// ClosedAddr is a loopback address nothing listens on: a port the system gave out and that was
// closed at once.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}

// DownRedis is a client of a Redis that is not there (a port nobody listens on), for tests of
// what a service answers when its backend is down. It fails fast: no retries, a short dial.
func DownRedis(t testing.TB) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: ClosedAddr(t), DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// WantStatus fails t unless err is a status of code whose message carries none of the cause's
// fragments in hidden: what a service answers must not leak the text of what failed inside it.
func WantStatus(t testing.TB, err error, code codes.Code, hidden ...string) {
	t.Helper()
	st := status.Convert(err)
	if diff := cmp.Diff(code, st.Code()); diff != "" {
		t.Errorf("code (-want +got):\n%s\nerror: %v", diff, err)
	}
	for _, h := range hidden {
		if strings.Contains(st.Message(), h) {
			t.Errorf("message %q carries the cause's text %q", st.Message(), h)
		}
	}
}

// DeleteKeys deletes every key under prefix, ignoring errors (it cleans up after a test or a
// benchmark run).
func DeleteKeys(ctx context.Context, rdb *redis.Client, prefix string) {
	iter := rdb.Scan(ctx, 0, prefix+"*", 500).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	for i := 0; i < len(keys); i += 500 {
		_ = rdb.Del(ctx, keys[i:min(i+500, len(keys))]...).Err()
	}
}

// Serve runs srv on an in-memory listener (bufconn) until the test ends and returns a client
// connection to it. At the end the connection is closed first, so no call is left open, then
// srv shuts down and Serve waits for it.
func Serve(t testing.TB, srv *rpc.Server) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ctx, lis)
	}()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		cancel()
		<-done
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		cancel()
		<-done
	})
	return conn
}

// pollEvery spaces the tries of Poll: quick at first, then no more than four a second, so a
// long wait does not load a busy machine.
func pollEvery() backoff.Policy {
	return backoff.Policy{Initial: 10 * time.Millisecond, Max: 250 * time.Millisecond, Jitter: 0.2}
}

// Poll calls cond until it holds and reports true, or false when timeout passes first (a
// liveness bound, not a timing assertion). It is the tests' one polling loop; WaitFor is Poll
// that fails the test. Use Poll where the failure should say more than what was awaited.
func Poll(timeout time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return backoff.Until(ctx, pollEvery(), cond) || cond()
}

// WaitFor polls cond until it holds and fails the test when timeout passes first.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(timeout, cond) {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// Logger is a test's logger: debug logs to stderr with -v, else nothing.
func Logger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}
