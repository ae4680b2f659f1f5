package app

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/hermes-agent/hermes/internal/testenv"
)

func TestRedisClientURLs(t *testing.T) {
	tests := []struct {
		url     string
		where   string
		wantErr bool
	}{
		{url: "redis://127.0.0.1:6379/0", where: "127.0.0.1:6379"},
		{url: "rediss://:pw@redis.example:6380/2", where: "redis.example:6380"},
		{url: "redis://s1:26379/0?master_name=main&addr=s2:26379", where: `primary "main" of sentinels s1:26379,s2:26379`},
		{url: "redis://s1:26379/x?master_name=main", wantErr: true},
		{url: "http://127.0.0.1:6379", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			rdb, where, err := redisClient(tt.url)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error = %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			_ = rdb.Close()
			if diff := cmp.Diff(tt.where, where); diff != "" {
				t.Errorf("where (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRedisThroughSentinel: a URL with master_name reaches the primary a real Sentinel names
// (the test Redis), and the client it gives writes there.
func TestRedisThroughSentinel(t *testing.T) {
	rdb, prefix := testenv.Redis(t)
	primary := rdb.Options().Addr
	sentinel := startSentinel(t, primary)

	client, _, err := redisClient(fmt.Sprintf("redis://%s/%d?master_name=hermes-test", sentinel, rdb.Options().DB))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := client.Set(ctx, prefix+"via-sentinel", "yes", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := rdb.Get(ctx, prefix+"via-sentinel").Result()
	if err != nil || got != "yes" {
		t.Errorf("the primary holds %q, %v; want the value written through Sentinel", got, err)
	}
}

// startSentinel runs redis-server as a Sentinel on a free loopback port, monitoring primary as
// "hermes-test", until the test ends, and returns its address once it names the primary.
func startSentinel(t *testing.T, primary string) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is required to run a Sentinel (scripts/ensure-backends.sh installs it): %v", err)
	}
	host, port, err := net.SplitHostPort(primary)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	_, sport, _ := net.SplitHostPort(addr)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	body := strings.Join([]string{
		"port " + sport, "bind 127.0.0.1", "dir " + dir, "logfile " + filepath.Join(dir, "sentinel.log"),
		fmt.Sprintf("sentinel monitor hermes-test %s %s 1", host, port),
	}, "\n") + "\n"
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, conf, "--sentinel")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	s := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = s.Close() })
	testenv.WaitFor(t, 15*time.Second, "the sentinel names the primary", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		got, err := s.GetMasterAddrByName(ctx, "hermes-test").Result()
		return err == nil && len(got) == 2
	})
	return addr
}
